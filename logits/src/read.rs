//! Readers: `.npy` (a directory of them), `.npz` and `.safetensors`, dense
//! `[rows, V]` or `[V]` arrays in float16, bfloat16, float32 or float64,
//! holding probabilities or logits; the sparse-with-tail format; and the
//! single arrays of a command-line argument (an inline list, a `.npy` or a
//! `.json` file).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Cursor, Read};
use std::path::Path;

use half::{bf16, f16};
use ndarray::ArrayD;
use ndarray_npy::npy::header::Header;
use ndarray_npy::{ReadDataError, ReadNpyExt, ReadableElement};
use py_literal::Value as PyValue;
use safetensors::{Dtype, SafeTensors};

use mdsd_core::{ProbabilityRow, SUM_TOLERANCE};

use crate::npy::{npy_descriptor, npy_integers, numpy_dtype_name};
use crate::vocabulary::{aligned, check_vocabularies};
use crate::{Layout, LogitsError, Matrix, Pairs, Values, VocabularyOptions};

/// The rows one argument holds: an inline comma-separated list (one row),
/// a `.npy` file (any float dtype; `[V]` or `[rows, V]`) or a `.json` file
/// (an array of numbers, or an array of arrays).
///
/// ```
/// let rows = mdsd_logits::read_rows("0.5, 0.3,0.2")?;
/// assert_eq!((rows.rows(), rows.row(0)), (1, &[0.5, 0.3, 0.2][..]));
/// assert!(mdsd_logits::read_rows("0.5,x").is_err());
/// # Ok::<(), mdsd_logits::LogitsError>(())
/// ```
pub fn read_rows(spec: impl AsRef<OsStr>) -> Result<Matrix, LogitsError> {
    read_typed_rows(spec.as_ref()).map(|(rows, _, _)| rows)
}

/// [`read_rows`], with the float type the rows were stored in and the
/// shape of the array that held them.
fn read_typed_rows(spec: &OsStr) -> Result<(Matrix, FloatType, Vec<usize>), LogitsError> {
    // A path need not be UTF-8; only an inline list is parsed as text.
    let path = Path::new(spec);
    let shown = path.display().to_string();
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("npy") => {
            let bytes = crate::files::read(path)?;
            let stem = path
                .file_stem()
                .map_or(shown.clone(), |s| s.to_string_lossy().into_owned());
            let array = npy_floats(&bytes, &stem, &shown)?;
            let (float, shape) = (array.float, array.shape.clone());
            Ok((rows_of(array, &shown)?, float, shape))
        }
        Some("json") => {
            let (rows, nested) = read_json(path)?;
            let shape = match nested {
                true => vec![rows.rows(), rows.cols()],
                false => vec![rows.cols()],
            };
            Ok((rows, FloatType::Float64, shape))
        }
        _ => {
            let rows = read_list(&shown, spec.to_str())?;
            let shape = vec![rows.cols()];
            Ok((rows, FloatType::Float64, shape))
        }
    }
}

/// An inline comma-separated list (`None`: text that is not UTF-8, shown
/// as `shown`).
fn read_list(shown: &str, text: Option<&str>) -> Result<Matrix, LogitsError> {
    let Some(text) = text else {
        return Err(LogitsError::List {
            position: 0,
            item: shown.to_string(),
        });
    };
    {
        let row = text
            .split(',')
            .enumerate()
            .map(|(position, item)| {
                item.trim().parse::<f64>().map_err(|_| LogitsError::List {
                    position,
                    item: item.trim().to_string(),
                })
            })
            .collect::<Result<Vec<f64>, _>>()?;
        Matrix::new(1, row.len(), row)
    }
}

/// A `.json` file of one row (an array of numbers) or several (an array
/// of arrays of equal length); true for the second.
fn read_json(file: &Path) -> Result<(Matrix, bool), LogitsError> {
    let path = &file.display().to_string();
    let format = |message: String| LogitsError::Format {
        path: path.to_string(),
        format: "json",
        message,
    };
    let text = String::from_utf8(crate::files::read(file)?)
        .map_err(|e| format(format!("not UTF-8 text: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
    let number_row = |row: &serde_json::Value, r: usize| -> Result<Vec<f64>, LogitsError> {
        row.as_array()
            .ok_or_else(|| format(format!("row {r} is not an array")))?
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_f64()
                    .ok_or_else(|| format(format!("row {r} item {i} ({x}) is not a number")))
            })
            .collect()
    };
    let items = value
        .as_array()
        .ok_or_else(|| format("it must hold an array of numbers or an array of arrays".into()))?;
    let nested = items.first().is_some_and(serde_json::Value::is_array);
    let rows = if nested {
        items
            .iter()
            .enumerate()
            .map(|(r, row)| number_row(row, r))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        vec![number_row(&value, 0)?]
    };
    Ok((Matrix::from_rows(&rows)?, nested))
}

/// Target and draft rows from the arguments of a command: `target` and
/// each of `drafts` read by [`read_rows`] (several drafts for independent
/// drafts, one per draft model). An argument of one row is shared by every
/// row of the others; `options.values` says what they hold (probabilities
/// unless told otherwise: an inline list is no place to guess). Rows of
/// probabilities are checked and renormalised here, within their type's
/// [`FloatType::sum_tolerance`], as a data file's are; then brought to one
/// vocabulary as `options.vocabulary` says.
pub fn read_argument_pairs(
    target: &OsStr,
    drafts: &[OsString],
    options: &ReadOptions,
) -> Result<Pairs, LogitsError> {
    let read = |spec: &OsStr, role: &'static str| {
        let (rows, float, shape) =
            read_typed_rows(spec).map_err(|source| LogitsError::InArgument {
                role,
                source: Box::new(source),
            })?;
        Ok(StoredRows { rows, float, shape })
    };
    let target_rows = read(target, "target")?;
    let draft_rows = drafts
        .iter()
        .map(|spec| read(spec, "draft"))
        .collect::<Result<Vec<_>, _>>()?;
    let source = std::iter::once(target)
        .chain(drafts.iter().map(OsString::as_os_str))
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" / ");
    stored_pairs(target_rows, draft_rows, source, options)
}

/// Rows held in memory with the float type they were stored in (an
/// argument of a command, an array from Python) and the shape of their
/// array (leading axes, then the vocabulary).
#[derive(Debug, Clone)]
pub struct StoredRows {
    pub rows: Matrix,
    pub float: FloatType,
    pub shape: Vec<usize>,
}

/// Target and draft rows held in memory, as [`read_argument_pairs`] makes
/// them of its arguments: one row is shared by every row of the others,
/// `options.values` says what they hold (probabilities unless told
/// otherwise), rows of probabilities are checked and renormalised within
/// their type's [`FloatType::sum_tolerance`], and both sides are brought
/// to one vocabulary as `options.vocabulary` says. `source` names them in
/// messages.
pub fn stored_pairs(
    target: StoredRows,
    drafts: Vec<StoredRows>,
    source: String,
    options: &ReadOptions,
) -> Result<Pairs, LogitsError> {
    let values = options.values;
    let in_argument = |role| {
        move |source| LogitsError::InArgument {
            role,
            source: Box::new(source),
        }
    };
    let checked = |stored: StoredRows, role: &'static str| match values {
        Some(Values::Logits) => Ok(stored.rows),
        _ => renormalised_argument(stored.rows, stored.float).map_err(in_argument(role)),
    };
    let shape = target.shape.clone();
    let target_rows = checked(target, "target")?;
    let draft_rows = drafts
        .into_iter()
        .map(|stored| checked(stored, "draft"))
        .collect::<Result<Vec<_>, _>>()?;
    let rows = draft_rows
        .iter()
        .map(Matrix::rows)
        .fold(target_rows.rows(), usize::max);
    if draft_rows.is_empty() {
        return Err(LogitsError::MissingArray {
            path: source,
            role: "draft",
            expected: "at least one draft argument".into(),
            found: String::new(),
        });
    }
    let target_rows = target_rows.broadcast(rows);
    let draft_rows: Vec<Matrix> = draft_rows.into_iter().map(|m| m.broadcast(rows)).collect();
    for other in &draft_rows {
        check_row_count(&source, &target_rows, other)?;
    }
    check_vocabularies(&source, &target_rows, &draft_rows, &options.vocabulary)?;
    let values = values.unwrap_or(Values::Probabilities);
    let (target, mut drafts, cut) = aligned(target_rows, draft_rows, values, &options.vocabulary)?;
    let draft = drafts.remove(0);
    Ok(Pairs {
        target,
        draft,
        more_drafts: drafts,
        values,
        layout: Layout::Dense,
        shape,
        cut,
        source,
    })
}

/// Names the target's array may have, in order of preference; a name with
/// "logits" in it holds logits.
pub const TARGET_NAMES: [&str; 4] = ["p", "p_target", "target", "target_logits"];
/// Names the draft's array may have.
pub const DRAFT_NAMES: [&str; 4] = ["q", "q_draft", "draft", "draft_logits"];

/// The float type an array was stored in, which sets how far from 1 its
/// probability rows may sum. Inline lists and `.json` files are read as
/// [`FloatType::Float64`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatType {
    Float16,
    BFloat16,
    Float32,
    Float64,
}

impl FloatType {
    /// How far from 1 a row of `entries` probabilities stored in this type
    /// may sum before it is refused (`docs/DESIGN.md` §7); within it the
    /// row is renormalised in f64. Rounding a probability x to the type
    /// moves it by at most u x in the normal range (u the unit roundoff)
    /// and by at most s / 2 below it (s the subnormal spacing), so a row's
    /// sum moves by at most u + entries s / 2. The tolerance is twice that,
    /// for a row computed in the type as well as stored in it, and never
    /// less than [`SUM_TOLERANCE`], the tolerance of exact input: float16
    /// over 151936 tokens gets 1.0e-2, bfloat16 7.8e-3, float32 and
    /// float64 1e-6.
    pub fn sum_tolerance(self, entries: usize) -> f64 {
        let (unit_roundoff, subnormal_spacing) = match self {
            Self::Float16 => (2f64.powi(-11), 2f64.powi(-24)),
            Self::BFloat16 => (2f64.powi(-8), 2f64.powi(-133)),
            Self::Float32 => (2f64.powi(-24), 2f64.powi(-149)),
            Self::Float64 => (2f64.powi(-53), f64::from_bits(1)),
        };
        SUM_TOLERANCE.max(2.0 * unit_roundoff + entries as f64 * subnormal_spacing)
    }
}

impl std::fmt::Display for FloatType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Float16 => "float16",
            Self::BFloat16 => "bfloat16",
            Self::Float32 => "float32",
            Self::Float64 => "float64",
        })
    }
}

/// How to read a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// What the rows hold; `None` decides from the arrays' names ("logits")
    /// and values (any outside [0, 1] means logits).
    pub values: Option<Values>,
    /// How the draft's vocabulary relates to the target's (by default the
    /// two rows must have the same length).
    pub vocabulary: VocabularyOptions,
    /// The draft arrays by name, one per draft model (drafts from
    /// different models: [`Pairs::more_drafts`] holds the second on);
    /// empty: the one array [`DRAFT_NAMES`] finds.
    pub draft_arrays: Vec<String>,
}

/// Reads target and draft rows from `path`: a `.npz` or `.safetensors`
/// file holding both, or a directory of `.npy` files (as `../shared/data`'s
/// `dense/`). Arrays are found by [`TARGET_NAMES`] and [`DRAFT_NAMES`]; a
/// `.safetensors` file with `ids`, `p`, `q`, `p_tail` and `q_tail` is the
/// sparse-with-tail format (rows of K + 1 symbols).
pub fn read_pairs(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Pairs, LogitsError> {
    with_arrays(path.as_ref(), |arrays| assemble(arrays, options))
}

/// Opens a data file (or directory of `.npy` files) as named arrays and
/// hands them to `read`.
pub(crate) fn with_arrays<T>(
    path: &Path,
    read: impl FnOnce(&mut dyn Arrays) -> Result<T, LogitsError>,
) -> Result<T, LogitsError> {
    let shown = path.display().to_string();
    if path.is_dir() {
        return read(&mut NpyDirectory::open(path, &shown)?);
    }
    crate::files::regular_file(path)?;
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("npz") => {
            let bytes = crate::files::read(path)?;
            read(&mut Npz::open(bytes, &shown)?)
        }
        Some("safetensors") => {
            let bytes = crate::files::read(path)?;
            read(&mut Safetensors::open(&bytes, &shown)?)
        }
        _ => Err(LogitsError::Format {
            path: shown,
            format: "data",
            message: "expected a .npz or .safetensors file, or a directory of .npy files \
                      (p_target.npy and q_draft.npy)"
                .into(),
        }),
    }
}

/// [`read_pairs`] for the bytes of a `.safetensors` file; `source` names it
/// in messages.
pub fn read_safetensors_pairs(
    bytes: &[u8],
    source: &str,
    options: &ReadOptions,
) -> Result<Pairs, LogitsError> {
    assemble(&mut Safetensors::open(bytes, source)?, options)
}

/// The float types rows are stored in, little-endian, as `.safetensors`
/// files and `.npy` windows hold them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Element {
    F16,
    BF16,
    F32,
    F64,
}

impl Element {
    pub(crate) fn bytes(self) -> usize {
        match self {
            Element::F16 | Element::BF16 => 2,
            Element::F32 => 4,
            Element::F64 => 8,
        }
    }

    pub(crate) fn float(self) -> FloatType {
        match self {
            Element::F16 => FloatType::Float16,
            Element::BF16 => FloatType::BFloat16,
            Element::F32 => FloatType::Float32,
            Element::F64 => FloatType::Float64,
        }
    }

    /// Little-endian values to f64.
    pub(crate) fn decode(self, bytes: &[u8], out: &mut Vec<f64>) {
        match self {
            Element::F16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f64()),
            ),
            Element::BF16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f64()),
            ),
            Element::F32 => out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            ),
            Element::F64 => out.extend(
                bytes
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes(b.try_into().expect("chunks of 8 bytes"))),
            ),
        }
    }
}

/// An array as read: shape and values in f64, and the type they were
/// stored in.
pub(crate) struct Array {
    pub(crate) name: String,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<f64>,
    pub(crate) float: FloatType,
}

/// Whether a file's array names are those of rows of top-k entries
/// (`crate::top_k`): per-side ids, or shared ids without the sparse
/// format's tails.
pub(crate) fn is_top_k(names: &[String]) -> bool {
    let has = |name: &str| names.iter().any(|n| n == name);
    (has("p_ids") && has("q_ids")) || (has("ids") && !has("p_tail") && !has("q_tail"))
}

/// A file (or directory) of named arrays.
pub(crate) trait Arrays {
    fn path(&self) -> &str;
    fn names(&self) -> Vec<String>;
    fn shape(&mut self, name: &str) -> Result<Vec<usize>, LogitsError>;
    fn floats(&mut self, name: &str) -> Result<Array, LogitsError>;
    /// An integer array (token ids): shape and values, whichever of int32,
    /// int64, uint32, uint64 it is stored as.
    fn integers(&mut self, name: &str) -> Result<(Vec<usize>, Vec<i128>), LogitsError>;
    /// A header entry, for formats that have them.
    fn metadata(&self, _key: &str) -> Option<String> {
        None
    }
}

pub(crate) fn assemble(
    arrays: &mut dyn Arrays,
    options: &ReadOptions,
) -> Result<Pairs, LogitsError> {
    let names = arrays.names();
    if is_top_k(&names) {
        return Err(LogitsError::TopKOnly {
            path: arrays.path().to_string(),
            found: names.join(", "),
        });
    }
    let sparse = ["ids", "p", "q", "p_tail", "q_tail"]
        .iter()
        .all(|n| names.iter().any(|m| m == n));
    if sparse {
        if options.vocabulary != VocabularyOptions::default() {
            return Err(LogitsError::Format {
                path: arrays.path().to_string(),
                format: "sparse-with-tail",
                message: "its rows hold kept tokens and a lumped tail, not a vocabulary that \
                          --vocab or --draft-vocab-map could cut or map"
                    .into(),
            });
        }
        if !options.draft_arrays.is_empty() {
            return Err(LogitsError::Format {
                path: arrays.path().to_string(),
                format: "sparse-with-tail",
                message: "it holds one draft (`q`), not the named draft arrays asked for".into(),
            });
        }
        return sparse_pairs(arrays, options);
    }
    let find = |role: &'static str, candidates: &[&str]| {
        candidates
            .iter()
            .find(|c| names.iter().any(|n| n == *c))
            .map(|c| c.to_string())
            .ok_or_else(|| LogitsError::MissingArray {
                path: arrays.path().to_string(),
                role,
                expected: candidates.join(", "),
                found: names.join(", "),
            })
    };
    let target_name = find("target", &TARGET_NAMES)?;
    let draft_names = if options.draft_arrays.is_empty() {
        vec![find("draft", &DRAFT_NAMES)?]
    } else {
        (options.draft_arrays.iter())
            .map(|name| find("draft", std::slice::from_ref(&name.as_str())))
            .collect::<Result<_, _>>()?
    };
    let path = arrays.path().to_string();
    let target = arrays.floats(&target_name)?;
    let (target_float, shape) = (target.float, target.shape.clone());
    let target = rows_of(target, &path)?;
    let (mut drafts, mut floats) = (Vec::new(), Vec::new());
    for name in &draft_names {
        let draft = arrays.floats(name)?;
        floats.push(draft.float);
        let draft = rows_of(draft, &path)?;
        check_row_count(&path, &target, &draft)?;
        drafts.push(draft);
    }
    check_vocabularies(&path, &target, &drafts, &options.vocabulary)?;
    let named_logits = std::iter::once(&target_name)
        .chain(&draft_names)
        .any(|name| name.contains("logits"));
    let values = match options.values {
        Some(values) => values,
        None if named_logits => Values::Logits,
        None => detect(std::iter::once(&target).chain(&drafts)),
    };
    let (target, drafts) = match values {
        Values::Probabilities => (
            renormalised(target, target_float, &path, &target_name)?,
            (drafts.into_iter().zip(floats).zip(&draft_names))
                .map(|((rows, float), name)| renormalised(rows, float, &path, name))
                .collect::<Result<_, _>>()?,
        ),
        Values::Logits => (target, drafts),
    };
    let (target, mut drafts, cut) = aligned(target, drafts, values, &options.vocabulary)?;
    let draft = drafts.remove(0);
    Ok(Pairs {
        target,
        draft,
        more_drafts: drafts,
        values,
        layout: Layout::Dense,
        shape,
        cut,
        source: path,
    })
}

/// The last axis is the vocabulary; every leading axis indexes rows, in
/// C order (Hugging Face's `[batch, positions, vocabulary]` is batch x
/// positions rows). A 1-D array is one row.
fn rows_of(array: Array, path: &str) -> Result<Matrix, LogitsError> {
    let Some((&cols, leading)) = array.shape.split_last() else {
        return Err(LogitsError::Shape {
            path: path.to_string(),
            array: array.name,
            shape: array.shape,
            expected: "[..., vocabulary] (at least one axis)".into(),
        });
    };
    Matrix::new(leading.iter().product(), cols, array.data)
}

fn check_row_count(path: &str, target: &Matrix, draft: &Matrix) -> Result<(), LogitsError> {
    if target.rows() != draft.rows() {
        return Err(LogitsError::RowCount {
            path: path.to_string(),
            target: target.rows(),
            draft: draft.rows(),
        });
    }
    Ok(())
}

/// The sum of a row and whether every entry lies in [0, 1], in one pass
/// with eight independent accumulators: one running sum is a chain of V
/// dependent additions, and this way the pass vectorises.
fn sum_and_range(values: &[f64]) -> (f64, bool) {
    const LANES: usize = 8;
    let (mut sums, mut inside) = ([0.0; LANES], [true; LANES]);
    let mut chunks = values.chunks_exact(LANES);
    for chunk in &mut chunks {
        for lane in 0..LANES {
            sums[lane] += chunk[lane];
            // Compares, not min/max, whose NaN rules keep a loop scalar; a
            // NaN fails both.
            inside[lane] &= chunk[lane] >= 0.0 && chunk[lane] <= 1.0;
        }
    }
    for (lane, &x) in chunks.remainder().iter().enumerate() {
        sums[lane] += x;
        inside[lane] &= (0.0..=1.0).contains(&x);
    }
    (sums.iter().sum(), inside.iter().all(|&i| i))
}

/// Logits when any value lies outside [0, 1] (NaN included, which the
/// softmax then reports by index); probabilities otherwise.
fn detect<'a>(mut matrices: impl Iterator<Item = &'a Matrix>) -> Values {
    let probability = |x: &f64| (0.0..=1.0).contains(x);
    if matrices.all(|m| m.as_slice().iter().all(probability)) {
        Values::Probabilities
    } else {
        Values::Logits
    }
}

/// Each row divided by its f64 sum, after checking that its entries lie
/// in [0, 1] and that it sums to 1 within `float`'s
/// [`FloatType::sum_tolerance`].
fn renormalised(
    matrix: Matrix,
    float: FloatType,
    path: &str,
    array: &str,
) -> Result<Matrix, LogitsError> {
    let (rows, cols) = (matrix.rows(), matrix.cols());
    let tolerance = float.sum_tolerance(cols);
    // In place: the rows are this reader's own, and a second copy of a
    // window is what a bounded-memory read cannot afford.
    let mut data = matrix.into_data();
    for (row, values) in data.chunks_exact_mut(cols.max(1)).enumerate() {
        let (sum, inside) = sum_and_range(values);
        // Only a row with an entry outside [0, 1] is searched for it.
        let offender = (!inside)
            .then(|| (values.iter().enumerate()).find(|(_, x)| !(0.0..=1.0).contains(*x)))
            .flatten();
        if let Some((index, &value)) = offender {
            return Err(LogitsError::NotProbability {
                path: path.to_string(),
                array: array.to_string(),
                row,
                index,
                value,
            });
        }
        if (sum - 1.0).abs() > tolerance {
            return Err(LogitsError::NotProbabilities {
                path: path.to_string(),
                array: array.to_string(),
                row,
                sum,
                tolerance,
                float,
            });
        }
        values.iter_mut().for_each(|x| *x /= sum);
    }
    Matrix::new(rows, cols, data)
}

/// The rows of a command-line argument, checked as probability vectors
/// (the core's checks, within `float`'s [`FloatType::sum_tolerance`]) and
/// divided by their f64 sums.
fn renormalised_argument(matrix: Matrix, float: FloatType) -> Result<Matrix, LogitsError> {
    let (rows, cols) = (matrix.rows(), matrix.cols());
    let tolerance = float.sum_tolerance(cols);
    let mut data = Vec::with_capacity(rows * cols);
    for (row, values) in matrix.iter_rows().enumerate() {
        let sum = ProbabilityRow::within(values, tolerance)
            .map_err(|source| LogitsError::ArgumentRow { row, rows, source })?
            .sum();
        data.extend(values.iter().map(|x| x / sum));
    }
    Matrix::new(rows, cols, data)
}

/// The sparse-with-tail format: row r is `p[r, ..K]` then `p_tail[r]` (and
/// likewise for q), a distribution over K + 1 symbols.
fn sparse_pairs(arrays: &mut dyn Arrays, options: &ReadOptions) -> Result<Pairs, LogitsError> {
    let path = arrays.path().to_string();
    if options.values == Some(Values::Logits) {
        return Err(LogitsError::Format {
            path,
            format: "sparse-with-tail",
            message: "its rows are probabilities (kept tokens plus a tail mass), not logits".into(),
        });
    }
    let ids = arrays.shape("ids")?;
    let [rows, kept] = ids[..] else {
        return Err(LogitsError::Shape {
            path,
            array: "ids".into(),
            shape: ids,
            expected: "[rows, K]".into(),
        });
    };
    let mut side = |kept_name: &str, tail_name: &str| -> Result<Matrix, LogitsError> {
        let kept_array = arrays.floats(kept_name)?;
        let tail = arrays.floats(tail_name)?;
        let shape_error = |array: Array, expected: String| LogitsError::Shape {
            path: path.clone(),
            array: array.name,
            shape: array.shape,
            expected,
        };
        if kept_array.shape != [rows, kept] {
            return Err(shape_error(
                kept_array,
                format!("[{rows}, {kept}] as `ids`"),
            ));
        }
        if tail.shape != [rows] {
            return Err(shape_error(
                tail,
                format!("[{rows}]: one tail mass per row"),
            ));
        }
        let outside = (tail.data.iter().enumerate()).find(|(_, m)| !(0.0..=1.0).contains(*m));
        if let Some((row, &value)) = outside {
            return Err(LogitsError::NotTailMass {
                path: path.clone(),
                array: tail_name.to_string(),
                row,
                value,
            });
        }
        // The row's sum moves by the rounding of both arrays: the coarser
        // type's tolerance holds.
        let float = [kept_array.float, tail.float]
            .into_iter()
            .max_by(|a, b| {
                a.sum_tolerance(kept + 1)
                    .total_cmp(&b.sum_tolerance(kept + 1))
            })
            .unwrap_or(FloatType::Float64);
        let mut data = Vec::with_capacity(rows * (kept + 1));
        for (row, mass) in kept_array.data.chunks_exact(kept.max(1)).zip(&tail.data) {
            data.extend_from_slice(row);
            data.push(*mass);
        }
        renormalised(Matrix::new(rows, kept + 1, data)?, float, &path, kept_name)
    };
    let target = side("p", "p_tail")?;
    let draft = side("q", "q_tail")?;
    let vocabulary = arrays.metadata("vocab_size").and_then(|v| v.parse().ok());
    Ok(Pairs {
        target,
        draft,
        more_drafts: Vec::new(),
        values: Values::Probabilities,
        layout: Layout::SparseWithTail { kept, vocabulary },
        shape: vec![rows, kept + 1],
        cut: None,
        source: path,
    })
}

/// A `.npy` file's array in f64, whichever float dtype it holds.
fn npy_floats(bytes: &[u8], name: &str, path: &str) -> Result<Array, LogitsError> {
    let format = |message: String| LogitsError::Format {
        path: path.to_string(),
        format: "npy",
        message: format!("array `{name}`: {message}"),
    };
    if bytes.is_empty() {
        return Err(format("the file is empty".into()));
    }
    crate::npy::header_fits(bytes, bytes.len() as u64, name, path)?;
    let mut cursor = Cursor::new(bytes);
    let header = Header::from_reader(&mut cursor).map_err(|e| format(e.to_string()))?;
    let descriptor = npy_descriptor(&header);
    let item_bytes = match descriptor.get(1..) {
        Some("f2") => 2,
        Some("f4") => 4,
        Some("f8") => 8,
        _ => {
            return Err(LogitsError::Dtype {
                path: path.to_string(),
                array: name.to_string(),
                dtype: numpy_dtype_name(&descriptor),
            });
        }
    };
    // A file cut short (an interrupted copy or dump): say so, with the
    // sizes, before the reader fails to fill its buffer.
    let needed =
        (header.shape.iter()).try_fold(item_bytes, |total: usize, &d| total.checked_mul(d));
    let held = bytes.len() - cursor.position() as usize;
    if needed.is_none_or(|needed| held < needed) {
        let needed = needed.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string());
        return Err(format(format!(
            "the file is truncated: its shape {:?} of {} needs {needed} bytes of data, \
             it holds {held}",
            header.shape,
            numpy_dtype_name(&descriptor)
        )));
    }
    let (array, float) = match item_bytes {
        4 => (
            ArrayD::<f32>::read_npy(bytes).map(|a| a.mapv(f64::from)),
            FloatType::Float32,
        ),
        8 => (ArrayD::<f64>::read_npy(bytes), FloatType::Float64),
        _ => (
            ArrayD::<Float16>::read_npy(bytes).map(|a| a.mapv(|h| h.0.to_f64())),
            FloatType::Float16,
        ),
    };
    let array = array.map_err(|e| format(e.to_string()))?;
    Ok(Array {
        name: name.to_string(),
        shape: array.shape().to_vec(),
        data: array.iter().copied().collect(),
        float,
    })
}

/// float16 elements of a `.npy` file (ndarray-npy reads float32 and
/// float64 only; its `ReadableElement` is the extension point).
#[derive(Clone, Copy)]
struct Float16(f16);

impl ReadableElement for Float16 {
    fn read_to_end_exact_vec<R: Read>(
        mut reader: R,
        type_desc: &PyValue,
        len: usize,
    ) -> Result<Vec<Self>, ReadDataError> {
        let from_bytes: fn([u8; 2]) -> u16 = match type_desc {
            PyValue::String(s) if s == "<f2" => u16::from_le_bytes,
            PyValue::String(s) if s == ">f2" => u16::from_be_bytes,
            other => return Err(ReadDataError::WrongDescriptor(other.clone())),
        };
        let mut bytes = vec![0u8; 2 * len];
        reader.read_exact(&mut bytes).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => ReadDataError::MissingData,
            _ => ReadDataError::Io(e),
        })?;
        let extra = reader.read_to_end(&mut Vec::new())?;
        if extra > 0 {
            return Err(ReadDataError::ExtraBytes(extra));
        }
        Ok(bytes
            .chunks_exact(2)
            .map(|b| Float16(f16::from_bits(from_bytes([b[0], b[1]]))))
            .collect())
    }
}

/// The `.npy` files of a directory, named by their stems.
struct NpyDirectory {
    path: String,
    files: Vec<(String, std::path::PathBuf)>,
}

impl NpyDirectory {
    fn open(dir: &Path, shown: &str) -> Result<Self, LogitsError> {
        let io = |source| LogitsError::Io {
            path: shown.to_string(),
            source,
        };
        let mut files = Vec::new();
        for entry in fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().and_then(|e| e.to_str()) == Some("npy")
                && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
            {
                files.push((stem.to_string(), path.clone()));
            }
        }
        files.sort();
        Ok(Self {
            path: shown.to_string(),
            files,
        })
    }

    fn bytes(&self, name: &str) -> Result<(Vec<u8>, String), LogitsError> {
        let Some((_, file)) = self.files.iter().find(|(n, _)| n == name) else {
            return Err(LogitsError::MissingArray {
                path: self.path.clone(),
                role: "requested",
                expected: format!("{name}.npy"),
                found: self.names().join(", "),
            });
        };
        let shown = file.display().to_string();
        let bytes = crate::files::read(file)?;
        Ok((bytes, shown))
    }
}

impl Arrays for NpyDirectory {
    fn path(&self) -> &str {
        &self.path
    }

    fn names(&self) -> Vec<String> {
        self.files.iter().map(|(n, _)| n.clone()).collect()
    }

    fn shape(&mut self, name: &str) -> Result<Vec<usize>, LogitsError> {
        let (bytes, shown) = self.bytes(name)?;
        npy_shape(&bytes, name, &shown)
    }

    fn floats(&mut self, name: &str) -> Result<Array, LogitsError> {
        let (bytes, shown) = self.bytes(name)?;
        npy_floats(&bytes, name, &shown)
    }

    fn integers(&mut self, name: &str) -> Result<(Vec<usize>, Vec<i128>), LogitsError> {
        let (bytes, shown) = self.bytes(name)?;
        npy_integers(&bytes, name, &shown)
    }
}

fn npy_shape(bytes: &[u8], name: &str, path: &str) -> Result<Vec<usize>, LogitsError> {
    crate::npy::header_fits(bytes, bytes.len() as u64, name, path)?;
    Header::from_reader(&mut Cursor::new(bytes))
        .map(|h| h.shape)
        .map_err(|e| LogitsError::Format {
            path: path.to_string(),
            format: "npy",
            message: format!("array `{name}`: {e}"),
        })
}

/// A `.npz` archive: a zip of `.npy` files, compressed or not.
struct Npz {
    path: String,
    archive: zip::ZipArchive<Cursor<Vec<u8>>>,
}

impl Npz {
    fn open(bytes: Vec<u8>, path: &str) -> Result<Self, LogitsError> {
        let archive =
            zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| LogitsError::Format {
                path: path.to_string(),
                format: "npz",
                message: e.to_string(),
            })?;
        Ok(Self {
            path: path.to_string(),
            archive,
        })
    }

    fn member(&mut self, name: &str) -> Result<Vec<u8>, LogitsError> {
        let format = |message: String| LogitsError::Format {
            path: self.path.clone(),
            format: "npz",
            message: format!("member `{name}.npy`: {message}"),
        };
        let mut file = self
            .archive
            .by_name(&format!("{name}.npy"))
            .map_err(|e| format(e.to_string()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| format(e.to_string()))?;
        Ok(bytes)
    }
}

impl Arrays for Npz {
    fn path(&self) -> &str {
        &self.path
    }

    fn names(&self) -> Vec<String> {
        self.archive
            .file_names()
            .filter_map(|n| n.strip_suffix(".npy"))
            .map(String::from)
            .collect()
    }

    fn shape(&mut self, name: &str) -> Result<Vec<usize>, LogitsError> {
        let bytes = self.member(name)?;
        npy_shape(&bytes, name, &self.path)
    }

    fn floats(&mut self, name: &str) -> Result<Array, LogitsError> {
        let bytes = self.member(name)?;
        npy_floats(&bytes, name, &self.path)
    }

    fn integers(&mut self, name: &str) -> Result<(Vec<usize>, Vec<i128>), LogitsError> {
        let bytes = self.member(name)?;
        npy_integers(&bytes, name, &self.path)
    }
}

struct Safetensors<'a> {
    bytes: &'a [u8],
    tensors: SafeTensors<'a>,
    path: String,
}

impl<'a> Safetensors<'a> {
    fn open(bytes: &'a [u8], source: &str) -> Result<Self, LogitsError> {
        let tensors = SafeTensors::deserialize(bytes).map_err(|e| LogitsError::Format {
            path: source.to_string(),
            format: "safetensors",
            message: e.to_string(),
        })?;
        Ok(Self {
            bytes,
            tensors,
            path: source.to_string(),
        })
    }

    fn view(&self, name: &str) -> Result<safetensors::tensor::TensorView<'_>, LogitsError> {
        self.tensors.tensor(name).map_err(|e| LogitsError::Format {
            path: self.path.clone(),
            format: "safetensors",
            message: e.to_string(),
        })
    }
}

impl Arrays for Safetensors<'_> {
    fn path(&self) -> &str {
        &self.path
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tensors.names().into_iter().map(String::from).collect();
        names.sort();
        names
    }

    fn shape(&mut self, name: &str) -> Result<Vec<usize>, LogitsError> {
        Ok(self.view(name)?.shape().to_vec())
    }

    fn metadata(&self, key: &str) -> Option<String> {
        // The header's metadata, parsed again: `SafeTensors` keeps only
        // the tensors.
        SafeTensors::read_metadata(self.bytes)
            .ok()
            .and_then(|(_, m)| m.metadata().as_ref()?.get(key).cloned())
    }

    fn integers(&mut self, name: &str) -> Result<(Vec<usize>, Vec<i128>), LogitsError> {
        let view = self.view(name)?;
        let bytes = view.data();
        let data: Vec<i128> = match view.dtype() {
            Dtype::I32 => (bytes.chunks_exact(4))
                .map(|b| i32::from_le_bytes(b.try_into().expect("chunks of 4 bytes")).into())
                .collect(),
            Dtype::U32 => (bytes.chunks_exact(4))
                .map(|b| u32::from_le_bytes(b.try_into().expect("chunks of 4 bytes")).into())
                .collect(),
            Dtype::I64 => (bytes.chunks_exact(8))
                .map(|b| i64::from_le_bytes(b.try_into().expect("chunks of 8 bytes")).into())
                .collect(),
            Dtype::U64 => (bytes.chunks_exact(8))
                .map(|b| u64::from_le_bytes(b.try_into().expect("chunks of 8 bytes")).into())
                .collect(),
            other => {
                return Err(LogitsError::Dtype {
                    path: self.path.clone(),
                    array: name.to_string(),
                    dtype: format!("{other:?} (token ids are I32, I64, U32 or U64)"),
                });
            }
        };
        Ok((view.shape().to_vec(), data))
    }

    fn floats(&mut self, name: &str) -> Result<Array, LogitsError> {
        let view = self.view(name)?;
        let element = match view.dtype() {
            Dtype::F16 => Element::F16,
            Dtype::BF16 => Element::BF16,
            Dtype::F32 => Element::F32,
            Dtype::F64 => Element::F64,
            other => {
                return Err(LogitsError::Dtype {
                    path: self.path.clone(),
                    array: name.to_string(),
                    dtype: format!("{other:?}"),
                });
            }
        };
        let mut data = Vec::with_capacity(view.data().len() / element.bytes());
        element.decode(view.data(), &mut data);
        let float = element.float();
        Ok(Array {
            name: name.to_string(),
            shape: view.shape().to_vec(),
            data,
            float,
        })
    }
}
