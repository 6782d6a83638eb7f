//! # mdsd-flow
//!
//! The max-flow / min-cut formulation of multi-draft speculative sampling
//! (DESIGN §4): source -> draft sets (capacity Q(S)) -> tokens in the set ->
//! sink (capacity p(y)). Its max flow is alpha*, its flow is an optimal
//! verifier, and a minimum cut is the certificate H*. Polynomial in V for a
//! fixed n, and the exact method for independent drafts beyond the subset
//! search of mdsd-bounds. Filled in by issue 3; nothing is exported yet.
