//! # mdsd-convex
//!
//! The optimal verifier at full vocabulary (DESIGN §5): Global Resolution's
//! convex programs over the inner and outer systems, and the
//! enumeration-free selection form whose marginals are one-dimensional
//! integrals. Filled in by issue 5; nothing is exported yet.
