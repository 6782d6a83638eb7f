//! # mdsd-verify
//!
//! Heuristic and optimal verifiers behind one trait (DESIGN §6: NSS, naive,
//! SpecInfer, RRS without replacement, SpecTr K-SEQ, SpecHub, Khisti et al.,
//! Hu et al.'s greedy, the optimal ones), each exposing its exact conditional
//! law, and the harness that measures acceptance and losslessness exactly at
//! small V and by sampling at large V. Filled in by issue 4; nothing is
//! exported yet.
