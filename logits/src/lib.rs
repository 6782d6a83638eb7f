//! # mdsd-logits
//!
//! The path from a user's logit dump to distributions: .npy/.npz/.safetensors
//! readers (dense and sparse-with-tail), row transforms, and batched CPU
//! (rayon) and GPU (wgpu) backends for alpha* over many rows. Filled in by
//! issue 6; nothing is exported yet (the `mdsd` CLI reads .npy and .json
//! itself until then).
