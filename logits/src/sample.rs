//! The built-in real sample compiled into the library.

use crate::{LogitsError, Pairs, ReadOptions, read_safetensors_pairs};

/// The built-in sample's file as compiled in (what a report hashes).
pub const SAMPLE_BYTES: &[u8] = SAMPLE;

/// 32 rows (0, 32, ..., 992) of `../shared/data`'s sparse Qwen2.5-Coder
/// 1.5B / 0.5B pairs: top-1024 tokens of max(p, q) plus one lumped tail
/// symbol, 394 KB. Made by `scripts/make_fixtures.py`.
const SAMPLE: &[u8] = include_bytes!("../data/qwen-coder-sparse-32rows.safetensors");

/// Where the built-in sample came from, for reports.
pub const SAMPLE_NAME: &str = "built-in sample of Qwen2.5-Coder 1.5B / 0.5B";

/// The built-in sample's rows: a distribution over 1025 symbols each.
pub fn builtin_sample() -> Result<Pairs, LogitsError> {
    read_safetensors_pairs(SAMPLE, SAMPLE_NAME, &ReadOptions::default())
}
