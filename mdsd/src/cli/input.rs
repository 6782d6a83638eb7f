//! The input flags every command takes, declared once; the library's
//! [`Input`] reads what they name.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;
use mdsd::input::{Input, RowSpec};

#[derive(Debug, Args)]
pub struct InputArgs {
    /// Target distribution: `0.5,0.3,0.2`, a .npy file (1-D, or 2-D with
    /// one problem per row; float16/32/64) or a .json file (array, or array
    /// of arrays).
    #[arg(
        short = 'p',
        long = "target",
        value_name = "P",
        allow_hyphen_values = true
    )]
    target: Option<OsString>,
    /// Draft distribution, same forms as -p; repeat once per draft model
    /// with --scheme independent (draft i from the (i mod m)-th of m).
    #[arg(
        short = 'q',
        long = "draft",
        value_name = "Q",
        allow_hyphen_values = true
    )]
    drafts: Vec<OsString>,
    /// A data file holding target and draft rows instead of -p/-q: a .npz
    /// or .safetensors file (dense [..., V]: every leading axis indexes
    /// rows, as Hugging Face's [batch, positions, V]; or the
    /// sparse-with-tail format), or a directory of .npy files
    /// (p_target.npy, q_draft.npy).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["target", "drafts"])]
    data: Option<PathBuf>,
    /// The draft arrays of --data by name, one per draft model, for
    /// --scheme independent (`q_small,q_large`; draft i from the
    /// (i mod m)-th of m); by default the one draft array (q, q_draft,
    /// draft or draft_logits).
    #[arg(long, value_delimiter = ',', value_name = "NAMES", requires = "data")]
    draft_arrays: Vec<String>,
    /// The rows hold logits (default: probabilities for -p/-q; decided
    /// from array names and values for --data).
    #[arg(long, conflicts_with = "probabilities")]
    logits: bool,
    /// The rows hold probabilities.
    #[arg(long)]
    probabilities: bool,
    /// Cut target and draft rows to their first N tokens (pairs whose
    /// logit rows are padded to different lengths). A cut that drops more
    /// than 1e-6 of either side's probability in any row is refused.
    #[arg(long, value_name = "N")]
    vocab: Option<usize>,
    /// Cut with --vocab even where it drops more than 1e-6 (rows are
    /// renormalised to the kept tokens; the mass dropped is reported).
    #[arg(long, requires = "vocab")]
    allow_truncation: bool,
    /// The draft's vocabulary as target ids: a 1-D integer .npy with one
    /// entry per draft token (EAGLE-3's reduced draft vocabularies); the
    /// draft has probability 0 on target tokens outside it.
    #[arg(long, value_name = "FILE")]
    draft_vocab_map: Option<PathBuf>,
    /// The --draft-vocab-map entries are offsets (target id = draft id +
    /// entry), as EAGLE-3's `d2t` tables hold them.
    #[arg(long, requires = "draft_vocab_map")]
    draft_vocab_map_offsets: bool,
    /// Temperature applied to target and drafts (0 = argmax).
    #[arg(long, allow_hyphen_values = true)]
    temperature: Option<f64>,
    /// Keep the k most likely tokens of target and drafts.
    #[arg(long)]
    top_k: Option<usize>,
    /// Keep the smallest most-likely set of mass >= p of target and drafts.
    #[arg(long)]
    top_p: Option<f64>,
    /// Temperature of the drafts only (instead of --temperature for them).
    #[arg(long, allow_hyphen_values = true)]
    draft_temperature: Option<f64>,
    /// Independent drafts from the one draft row at several temperatures
    /// (`0.7,1.3`, a common way to diversify drafts): draft i at the
    /// (i mod m)-th of m; the draft's top-k and top-p apply to each. For
    /// --scheme independent (mdsd eval: that scheme's drafts, the other
    /// schemes draft at the draft's own temperature).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "T,T",
        allow_hyphen_values = true,
        conflicts_with = "draft_temperature"
    )]
    draft_temperatures: Vec<f64>,
    /// Top-k of the drafts only (Global Resolution's published grid
    /// truncates the draft only).
    #[arg(long)]
    draft_top_k: Option<usize>,
    /// Top-p of the drafts only.
    #[arg(long)]
    draft_top_p: Option<f64>,
    /// Temperature of the target only (instead of --temperature for it).
    #[arg(long, allow_hyphen_values = true)]
    target_temperature: Option<f64>,
    /// Top-k of the target only (vLLM drafts the whole vocabulary while
    /// the target keeps its top-k).
    #[arg(long)]
    target_top_k: Option<usize>,
    /// Top-p of the target only.
    #[arg(long)]
    target_top_p: Option<f64>,
    /// Which rows: R (that row), A..B (rows A to B - 1) or A.. (from A).
    #[arg(long, value_name = "R")]
    pub row: Option<RowSpec>,
    /// How many rows from --row R (default: all of them, or the one row
    /// --row R names).
    #[arg(long, value_name = "N")]
    pub rows: Option<usize>,
}

impl InputArgs {
    /// The library's input of these flags.
    pub fn input(&self) -> Input {
        Input {
            target: self.target.clone(),
            drafts: self.drafts.clone(),
            data: self.data.clone(),
            draft_arrays: self.draft_arrays.clone(),
            logits: self.logits,
            probabilities: self.probabilities,
            vocab: self.vocab,
            allow_truncation: self.allow_truncation,
            draft_vocab_map: self.draft_vocab_map.clone(),
            draft_vocab_map_offsets: self.draft_vocab_map_offsets,
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            draft_temperature: self.draft_temperature,
            draft_temperatures: self.draft_temperatures.clone(),
            draft_top_k: self.draft_top_k,
            draft_top_p: self.draft_top_p,
            target_temperature: self.target_temperature,
            target_top_k: self.target_top_k,
            target_top_p: self.target_top_p,
            row: self.row,
            rows: self.rows,
        }
    }
}
