//! Why a file could not be read or a batch not computed.

use mdsd_bounds::BoundError;
use mdsd_core::{CoreError, Shown};
use thiserror::Error;

/// Every failure of mdsd-logits, naming the file, array, row or index.
#[derive(Debug, Error)]
pub enum LogitsError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is {kind}, not a regular file: mdsd reads files (a pipe or a device could \
         block or never end); save the rows to a file"
    )]
    NotRegularFile { path: String, kind: &'static str },
    #[error("{path} is not a valid {format} file: {message}")]
    Format {
        path: String,
        format: &'static str,
        message: String,
    },
    #[error("{path} has no {role} array: expected one named {expected}, found [{found}]")]
    MissingArray {
        path: String,
        role: &'static str,
        expected: String,
        found: String,
    },
    #[error(
        "{path}: array `{array}` has dtype {dtype}; expected float16, bfloat16, float32 or float64"
    )]
    Dtype {
        path: String,
        array: String,
        dtype: String,
    },
    #[error("{path}: array `{array}` has shape {shape:?}; expected {expected}")]
    Shape {
        path: String,
        array: String,
        shape: Vec<usize>,
        expected: String,
    },
    #[error("{path}: the target has {target} rows but the draft has {draft}")]
    RowCount {
        path: String,
        target: usize,
        draft: usize,
    },
    #[error(
        "{path}: the target has {target} tokens per row but the draft has {draft} \
         (--vocab N cuts both to their first N tokens; --draft-vocab-map FILE maps a \
         draft vocabulary that is a subset of the target's)"
    )]
    VocabMismatch {
        path: String,
        target: usize,
        draft: usize,
    },
    #[error(
        "--vocab {vocabulary}: the {side} rows have {available} tokens; expected 1 to {available}"
    )]
    VocabularyCut {
        side: &'static str,
        vocabulary: usize,
        available: usize,
    },
    #[error(
        "--vocab {vocabulary}: {side} row {row} has no probability on its first {vocabulary} tokens"
    )]
    NothingKept {
        side: &'static str,
        row: usize,
        vocabulary: usize,
    },
    #[error(
        "--vocab {vocabulary}: cutting {side} row {row} to its first {vocabulary} tokens drops \
         {} of its probability, more than {:.0e}; pass --allow-truncation to cut anyway \
         (the rows are renormalised to the kept tokens)",
        Shown(*mass), crate::TRUNCATION_TOLERANCE
    )]
    Truncation {
        side: &'static str,
        row: usize,
        mass: f64,
        vocabulary: usize,
    },
    #[error("the draft vocabulary map {path}: {message}")]
    VocabMap { path: String, message: String },
    #[error(
        "{path}: `{array}` row {row} entry {index} is {}, which is not a probability \
         (pass --logits if the rows are logits)",
        Shown(*value)
    )]
    NotProbability {
        path: String,
        array: String,
        row: usize,
        index: usize,
        value: f64,
    },
    #[error(
        "{path}: `{array}` row {row} sums to {}, which is not within {tolerance:.1e} of 1, \
         the tolerance for {float} rows of this length (values in [0, 1] are read as \
         probabilities; pass --logits if they are logits)",
        Shown(*sum)
    )]
    NotProbabilities {
        path: String,
        array: String,
        row: usize,
        sum: f64,
        tolerance: f64,
        float: crate::FloatType,
    },
    #[error(
        "{path}: `{array}` row {row} (the row's tail mass) is {}, which is not a probability",
        Shown(*value)
    )]
    NotTailMass {
        path: String,
        array: String,
        row: usize,
        value: f64,
    },
    #[error("{path}: array `{array}`, row {row}: {message}")]
    TopKEntry {
        path: String,
        array: String,
        row: usize,
        message: String,
    },
    #[error(
        "{path} holds only each side's top-k entries ({found}): alpha* of such rows is an          interval, which `mdsd bound` and `mdsd eval` give for iid drafts"
    )]
    TopKOnly { path: String, found: String },
    #[error(
        "item {position} ({item:?}) is not a number; expected a comma-separated list, \
         a .npy or a .json file"
    )]
    List { position: usize, item: String },
    /// An error reading one argument of [`crate::read_argument_pairs`].
    #[error("the {role}: {source}")]
    InArgument {
        /// "target" or "draft".
        role: &'static str,
        source: Box<LogitsError>,
    },
    #[error("{path}: rows {rows:?} are not all among its {available} rows")]
    RowRange {
        path: String,
        rows: std::ops::Range<usize>,
        available: usize,
    },
    #[error("{what} row {row}: {source}")]
    InvalidRow {
        what: &'static str,
        row: usize,
        source: CoreError,
    },
    /// A row of a command-line argument that is not a probability vector
    /// (its row number shown when it holds more than one).
    #[error("{}{source}", if *rows > 1 { format!("row {row}: ") } else { String::new() })]
    ArgumentRow {
        row: usize,
        rows: usize,
        source: CoreError,
    },
    #[error("row {row}: {source}")]
    Bound { row: usize, source: BoundError },
    #[error("a batch needs rows of equal length: {what} has {found}, expected {expected}")]
    BatchShape {
        what: &'static str,
        expected: String,
        found: String,
    },
    #[error("GPU backend unavailable: {0}")]
    Gpu(String),
}
