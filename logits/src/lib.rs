//! # mdsd-logits
//!
//! The path from a user's logit dump to distributions and to alpha* over
//! many rows: readers for `.npy` / `.npz` / `.safetensors` files (dense
//! rows of probabilities or logits in float16, bfloat16, float32 or
//! float64, and the sparse-with-tail format of `../shared/data`), and
//! batched backends behind one trait, [`Backend`]: [`CpuBackend`] on
//! rayon's pool and [`WgpuBackend`], WGSL compute shaders in f64 through
//! wgpu (a [`LogitsError::Gpu`] when no adapter can run them). Entry
//! points: [`read_pairs`] (a data file), [`read_argument_pairs`] and
//! [`read_rows`] (the `-p`/`-q` arguments of the command line),
//! [`builtin_sample`], and the backend's methods.
//! Row transforms (temperature, top-k, top-p) are mdsd-core's
//! [`Transform`].
//!
//! ```
//! use mdsd_core::Transform;
//! use mdsd_logits::{Backend, CpuBackend, builtin_sample};
//!
//! let pairs = builtin_sample()?.head(4);
//! let cpu = CpuBackend;
//! let transform = Transform { top_k: Some(50), ..Transform::default() };
//! let p = cpu.distributions(&pairs.target, pairs.values, &transform)?;
//! let q = cpu.distributions(&pairs.draft, pairs.values, &transform)?;
//! let alpha = cpu.optimal_acceptance_iid(&p, &q, &[1, 4])?;
//! // One row per pair, one column per n; more drafts never hurt.
//! assert_eq!((alpha.rows(), alpha.cols()), (4, 2));
//! assert!(alpha.iter_rows().all(|a| a[0] <= a[1] + 1e-12));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backend;
mod error;
mod files;
mod gpu;
mod npy;
mod read;
mod rows;
mod sample;
mod stream;
mod top_k;
mod vocabulary;

pub use backend::{Backend, CpuBackend};
pub use error::LogitsError;
pub use gpu::WgpuBackend;
pub use mdsd_core::Transform;
pub use read::{
    DRAFT_NAMES, FloatType, ReadOptions, StoredRows, TARGET_NAMES, read_argument_pairs, read_pairs,
    read_rows, read_safetensors_pairs, stored_pairs,
};
pub use rows::{Layout, Matrix, Pairs, RowSelection, Values};
pub use sample::{SAMPLE_BYTES, SAMPLE_NAME, builtin_sample};
pub use stream::RowReader;
pub use top_k::{TopKRow, TopKRows, read_top_k};
pub use vocabulary::{DraftVocabMap, TRUNCATION_TOLERANCE, VocabularyCut, VocabularyOptions};
