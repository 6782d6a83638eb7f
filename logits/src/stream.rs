//! Rows of a dense data file read a window at a time, so that a dataset
//! larger than memory (100k rows of float16 at V = 151936 is 30 GB) is
//! evaluated in bounded memory: [`RowReader`] over a directory of `.npy`
//! files, a `.safetensors` file, or a directory of `.safetensors` shards
//! (rows concatenated in file-name order). Each window goes through the
//! same checks as [`crate::read_pairs`] (it is read as a file of those
//! rows alone), with one decision of logits or probabilities for all.
//!
//! Windows are read with positioned reads rather than a memory map: the
//! process then holds only what it reads, which a cap on its address space
//! (`ulimit -v`) bounds, and a mapped 30 GB file would not fit under.
//! Other files (`.npz`, sparse) are read whole.

use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};

use ndarray_npy::npy::header::Header;

use crate::npy::{npy_descriptor, numpy_dtype_name};
use crate::read::{Array, Arrays, Element, ReadOptions, read_pairs};
use crate::{LogitsError, Pairs, RowSelection, Values};

/// Where one array's rows lie in a file.
#[derive(Debug, Clone)]
struct Located {
    name: String,
    file: PathBuf,
    /// Byte offset of the first element.
    offset: u64,
    element: Element,
    shape: Vec<usize>,
}

impl Located {
    /// Rows are the product of the leading axes.
    fn rows(&self) -> usize {
        self.shape[..self.shape.len().saturating_sub(1)]
            .iter()
            .product()
    }

    fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(0)
    }
}

/// One file's arrays (a directory of `.npy` files, or one `.safetensors`
/// file), presented as a file of the rows of `window` alone.
#[derive(Debug, Clone)]
struct Part {
    path: String,
    arrays: Vec<Located>,
    rows: usize,
    window: Range<usize>,
}

impl Arrays for Part {
    fn path(&self) -> &str {
        &self.path
    }

    fn names(&self) -> Vec<String> {
        self.arrays.iter().map(|a| a.name.clone()).collect()
    }

    fn shape(&mut self, name: &str) -> Result<Vec<usize>, LogitsError> {
        let array = self.find(name)?;
        Ok(vec![self.window.len(), array.cols()])
    }

    fn floats(&mut self, name: &str) -> Result<Array, LogitsError> {
        let array = self.find(name)?;
        let row_bytes = array.cols() * array.element.bytes();
        let at = array.offset + (self.window.start * row_bytes) as u64;
        let bytes = read_window(&array.file, at, self.window.len() * row_bytes)?;
        let mut data = Vec::with_capacity(self.window.len() * array.cols());
        array.element.decode(&bytes, &mut data);
        Ok(Array {
            name: name.to_string(),
            shape: vec![self.window.len(), array.cols()],
            data,
            float: array.element.float(),
        })
    }

    fn integers(&mut self, name: &str) -> Result<(Vec<usize>, Vec<i128>), LogitsError> {
        Err(LogitsError::Format {
            path: self.path.clone(),
            format: "dense rows",
            message: format!("array `{name}` is read as rows of floats"),
        })
    }
}

impl Part {
    fn find(&self, name: &str) -> Result<&Located, LogitsError> {
        self.arrays
            .iter()
            .find(|a| a.name == name)
            .ok_or_else(|| LogitsError::MissingArray {
                path: self.path.clone(),
                role: "array",
                expected: name.to_string(),
                found: self.names().join(", "),
            })
    }
}

/// Fills `bytes` from `file` at byte `at`.
fn read_at(file: &Path, at: u64, bytes: &mut [u8]) -> Result<(), LogitsError> {
    let io = |source| LogitsError::Io {
        path: file.display().to_string(),
        source,
    };
    let mut handle = crate::files::open(file)?;
    handle.seek(SeekFrom::Start(at)).map_err(io)?;
    handle.read_exact(bytes).map_err(io)
}

/// `length` bytes of `file` from byte `at`, into a buffer that is not
/// zeroed first (it is about to be overwritten); a file shorter than its
/// header says is an error naming both sizes.
fn read_window(file: &Path, at: u64, length: usize) -> Result<Vec<u8>, LogitsError> {
    let shown = file.display().to_string();
    let mut handle = crate::files::open(file)?;
    let mut bytes = Vec::with_capacity(length);
    handle
        .seek(SeekFrom::Start(at))
        .and_then(|_| handle.take(length as u64).read_to_end(&mut bytes))
        .map_err(|source| LogitsError::Io {
            path: shown.clone(),
            source,
        })?;
    if bytes.len() < length {
        return Err(LogitsError::Format {
            path: shown,
            format: "rows",
            message: format!(
                "the file is truncated: rows from byte {at} need {length} bytes, it holds {}",
                bytes.len()
            ),
        });
    }
    Ok(bytes)
}

/// A `.npy` file's header: where its data starts, its element type and
/// shape; C order and little-endian floats only.
fn locate_npy(file: &Path, name: &str) -> Result<Located, LogitsError> {
    let shown = file.display().to_string();
    let format = |message: String| LogitsError::Format {
        path: shown.clone(),
        format: "npy",
        message,
    };
    let mut head = Vec::new();
    crate::files::open(file)?
        .take(1 << 17)
        .read_to_end(&mut head)
        .map_err(|source| LogitsError::Io {
            path: shown.clone(),
            source,
        })?;
    let held = std::fs::metadata(file)
        .map_err(|source| LogitsError::Io {
            path: shown.clone(),
            source,
        })?
        .len();
    crate::npy::header_fits(&head, held, name, &shown)?;
    let mut cursor = std::io::Cursor::new(&head[..]);
    let header = Header::from_reader(&mut cursor).map_err(|e| format(e.to_string()))?;
    if header.layout.is_fortran() {
        return Err(format(
            "Fortran order: rows are not contiguous; save it in C order".into(),
        ));
    }
    let descriptor = npy_descriptor(&header);
    let element = match descriptor.as_str() {
        "<f2" => Element::F16,
        "<f4" => Element::F32,
        "<f8" => Element::F64,
        _ => {
            return Err(LogitsError::Dtype {
                path: shown,
                array: name.to_string(),
                dtype: numpy_dtype_name(&descriptor),
            });
        }
    };
    checked(Located {
        name: name.to_string(),
        file: file.to_path_buf(),
        offset: cursor.position(),
        element,
        shape: header.shape,
    })
}

/// An array whose header promises what its file holds, checked before any
/// window is sized from it: at least one axis, and the data within the
/// file (a header can claim any shape; a cut copy holds less).
fn checked(array: Located) -> Result<Located, LogitsError> {
    let shown = array.file.display().to_string();
    if array.shape.is_empty() {
        return Err(LogitsError::Shape {
            path: shown,
            array: array.name,
            shape: array.shape,
            expected: "[..., vocabulary] (at least one axis)".into(),
        });
    }
    let held = std::fs::metadata(&array.file)
        .map_err(|source| LogitsError::Io {
            path: shown.clone(),
            source,
        })?
        .len();
    let needed = (array.shape.iter())
        .try_fold(array.element.bytes() as u128, |total, &d| {
            total.checked_mul(d as u128)
        })
        .and_then(|bytes| bytes.checked_add(u128::from(array.offset)));
    if needed.is_none_or(|needed| needed > u128::from(held)) {
        let needed = needed.map_or_else(|| "more than 2^128".to_string(), |n| n.to_string());
        return Err(LogitsError::Format {
            path: shown,
            format: "rows",
            message: format!(
                "array `{}` is truncated: its shape {:?} needs {needed} bytes to the end of its \
                 data, the file holds {held}",
                array.name, array.shape
            ),
        });
    }
    Ok(array)
}

/// A `.safetensors` file's header (8 bytes of length, then JSON): where
/// each float tensor starts.
fn locate_safetensors(file: &Path) -> Result<Vec<Located>, LogitsError> {
    let shown = file.display().to_string();
    let format = |message: String| LogitsError::Format {
        path: shown.clone(),
        format: "safetensors",
        message,
    };
    let held = std::fs::metadata(file)
        .map_err(|source| LogitsError::Io {
            path: shown.clone(),
            source,
        })?
        .len();
    if held < 8 {
        return Err(format(format!(
            "the file holds {held} bytes, fewer than the 8 of its header's length"
        )));
    }
    let mut length = [0u8; 8];
    read_at(file, 0, &mut length)?;
    let length = u64::from_le_bytes(length);
    if length > 100 << 20 {
        return Err(format(format!("a header of {length} bytes")));
    }
    if length > held - 8 {
        return Err(format(format!(
            "its header claims {length} bytes, the file holds {} after the length",
            held - 8
        )));
    }
    let mut header = vec![0; length as usize];
    read_at(file, 8, &mut header)?;
    let header: serde_json::Value =
        serde_json::from_slice(&header).map_err(|e| format(e.to_string()))?;
    let entries = header
        .as_object()
        .ok_or_else(|| format("the header is not an object".into()))?;
    let mut arrays = Vec::new();
    for (name, entry) in entries
        .iter()
        .filter(|(name, _)| name.as_str() != "__metadata__")
    {
        let element = match entry["dtype"].as_str() {
            Some("F16") => Element::F16,
            Some("BF16") => Element::BF16,
            Some("F32") => Element::F32,
            Some("F64") => Element::F64,
            // Other tensors (token ids) are not rows of floats.
            _ => continue,
        };
        let shape: Option<Vec<usize>> = (entry["shape"].as_array()).map(|s| {
            s.iter()
                .filter_map(|d| d.as_u64().map(|d| d as usize))
                .collect()
        });
        let (start, end) = (
            entry["data_offsets"][0].as_u64(),
            entry["data_offsets"][1].as_u64(),
        );
        let (Some(shape), Some(start), Some(end)) = (shape, start, end) else {
            return Err(format(format!("tensor `{name}` has no shape or offsets")));
        };
        // The offsets must hold exactly the tensor its shape and dtype
        // say, inside the file: a header can claim anything.
        let needed = (shape.iter()).try_fold(element.bytes() as u128, |total, &d| {
            total.checked_mul(d as u128)
        });
        let span = end.checked_sub(start).map(u128::from);
        if span.is_none() || span != needed {
            return Err(format(format!(
                "tensor `{name}` has data_offsets [{start}, {end}], which do not hold its shape \
                 {shape:?} of {} bytes each",
                element.bytes()
            )));
        }
        if u128::from(end) > u128::from(held - 8 - length) {
            return Err(format(format!(
                "tensor `{name}` ends at byte {end} of the data, the file holds {}",
                held - 8 - length
            )));
        }
        arrays.push(checked(Located {
            name: name.clone(),
            file: file.to_path_buf(),
            offset: 8 + length + start,
            element,
            shape,
        })?);
    }
    Ok(arrays)
}

/// A part's arrays, with the row count the target's array holds.
fn part(path: String, arrays: Vec<Located>) -> Result<Part, LogitsError> {
    let rows = crate::read::TARGET_NAMES
        .iter()
        .find_map(|name| arrays.iter().find(|a| a.name == *name))
        .map_or(0, Located::rows);
    Ok(Part {
        path,
        arrays,
        rows,
        window: 0..rows,
    })
}

/// The rows of a data file, read a window at a time.
pub struct RowReader {
    source: String,
    /// Dense parts in row order; empty when the file is read whole.
    parts: Vec<Part>,
    /// A file read whole (`.npz`, sparse, top-k refusals).
    whole: Option<Pairs>,
    options: ReadOptions,
    /// The stored shape of the (first) target array.
    shape: Vec<usize>,
}

impl RowReader {
    /// Opens `path`: its headers only, for the streamed forms. The choice of
    /// logits or probabilities is made on the first row and kept.
    pub fn open(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Self, LogitsError> {
        let path = path.as_ref();
        let source = path.display().to_string();
        // Named draft arrays (drafts of several models) are read whole.
        let parts = match options.draft_arrays.is_empty() {
            true => streamed_parts(path)?,
            false => None,
        };
        let Some(parts) = parts else {
            let whole = read_pairs(path, options)?;
            return Ok(Self {
                source,
                shape: whole.shape.clone(),
                parts: Vec::new(),
                whole: Some(whole),
                options: options.clone(),
            });
        };
        // Shards join only if their rows are as long as the first's.
        let cols = |part: &Part| part.arrays.iter().map(Located::cols).max().unwrap_or(0);
        if let Some(odd) = parts.iter().find(|p| cols(p) != cols(&parts[0])) {
            return Err(LogitsError::Format {
                path: odd.path.clone(),
                format: "shards",
                message: format!(
                    "its rows hold {} entries, the first shard's {}",
                    cols(odd),
                    cols(&parts[0])
                ),
            });
        }
        // One file keeps its stored shape; shards are rows of V.
        let shape = match &parts[..] {
            [one] => crate::read::TARGET_NAMES
                .iter()
                .find_map(|name| one.arrays.iter().find(|a| a.name == *name))
                .map_or_else(Vec::new, |a| a.shape.clone()),
            _ => {
                let cols = parts[0].arrays.first().map_or(0, Located::cols);
                vec![parts.iter().map(|p| p.rows).sum(), cols]
            }
        };
        let mut reader = Self {
            source,
            parts,
            whole: None,
            options: options.clone(),
            shape,
        };
        if reader.options.values.is_none() && reader.rows() > 0 {
            // Logits or probabilities: decided once, on the first row.
            let first = reader.read(0..1)?;
            reader.options.values = Some(first.values);
        }
        Ok(reader)
    }

    /// The rows of two `.npy` files, a command's `-p` and `-q`, read a
    /// window at a time as a data file's are (probabilities unless
    /// `options` says logits); `None` where they are not both `.npy` files
    /// of one shape and float type the streamed reader takes, which the
    /// whole read of [`crate::read_argument_pairs`] then broadcasts or
    /// refuses with its own message.
    pub fn open_npy_pair(
        target: &Path,
        draft: &Path,
        options: &ReadOptions,
    ) -> Result<Option<Self>, LogitsError> {
        let is_npy = |p: &Path| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| e.eq_ignore_ascii_case("npy"))
        };
        if !(is_npy(target) && is_npy(draft) && options.draft_arrays.is_empty()) {
            return Ok(None);
        }
        let (Ok(p), Ok(q)) = (locate_npy(target, "p"), locate_npy(draft, "q")) else {
            return Ok(None);
        };
        if p.shape != q.shape {
            return Ok(None);
        }
        let source = format!("{} / {}", target.display(), draft.display());
        let options = ReadOptions {
            values: Some(options.values.unwrap_or(Values::Probabilities)),
            ..options.clone()
        };
        let shape = p.shape.clone();
        Ok(Some(Self {
            parts: vec![part(source.clone(), vec![p, q])?],
            source,
            whole: None,
            options,
            shape,
        }))
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The target array's shape as stored (shards: rows summed).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rows(&self) -> usize {
        match &self.whole {
            Some(pairs) => pairs.rows(),
            None => self.parts.iter().map(|p| p.rows).sum(),
        }
    }

    /// What the rows hold: decided on opening, as the options say or from
    /// the first row (`None` only for a file without rows).
    pub fn values(&self) -> Option<Values> {
        match &self.whole {
            Some(pairs) => Some(pairs.values),
            None => self.options.values,
        }
    }

    /// Rows `rows` (global numbers), checked as [`read_pairs`] checks a
    /// file; a window that spans shards is read part by part.
    pub fn read(&self, rows: Range<usize>) -> Result<Pairs, LogitsError> {
        let selection = RowSelection {
            first: rows.start,
            count: Some(rows.len()),
        };
        if let Some(whole) = &self.whole {
            return whole.select(selection);
        }
        let rows = selection.range(self.rows(), &self.source)?;
        let mut pieces = Vec::new();
        let mut start = 0;
        for part in &self.parts {
            let local = rows.start.max(start)..rows.end.min(start + part.rows);
            if local.start < local.end {
                let mut window = part.clone();
                window.window = local.start - start..local.end - start;
                pieces.push(crate::read::assemble(&mut window, &self.options)?);
            }
            start += part.rows;
        }
        let mut pairs = Pairs::concatenate(pieces)?;
        pairs.shape = self.shape.clone();
        pairs.source = self.source.clone();
        Ok(pairs)
    }
}

/// The streamed parts of `path`, or `None` for a file read whole.
fn streamed_parts(path: &Path) -> Result<Option<Vec<Part>>, LogitsError> {
    let shown = path.display().to_string();
    if !path.is_dir() {
        crate::files::regular_file(path)?;
    }
    let is = |p: &Path, extension: &str| {
        p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case(extension))
    };
    if path.is_file() {
        if !is(path, "safetensors") {
            return Ok(None);
        }
        let arrays = locate_safetensors(path)?;
        // The sparse format and rows of top-k entries are read whole.
        let names: Vec<String> = arrays.iter().map(|a| a.name.clone()).collect();
        if with_arrays_names_are_dense(&names) {
            return Ok(Some(vec![part(shown, arrays)?]));
        }
        return Ok(None);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|source| LogitsError::Io {
            path: shown.clone(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let npy: Vec<&PathBuf> = entries.iter().filter(|p| is(p, "npy")).collect();
    let shards: Vec<&PathBuf> = entries.iter().filter(|p| is(p, "safetensors")).collect();
    if !npy.is_empty() {
        let stem = |file: &PathBuf| {
            (file.file_stem().and_then(|s| s.to_str()))
                .unwrap_or_default()
                .to_string()
        };
        let names: Vec<String> = npy.iter().map(|file| stem(file)).collect();
        if !with_arrays_names_are_dense(&names) {
            return Ok(None);
        }
        // Only the rows are located: other arrays (the next tokens, say)
        // may be of any type.
        let is_rows = |name: &str| {
            (crate::read::TARGET_NAMES.iter())
                .chain(&crate::read::DRAFT_NAMES)
                .any(|n| *n == name)
        };
        let arrays = npy
            .iter()
            .filter(|file| is_rows(&stem(file)))
            .map(|file| locate_npy(file, &stem(file)))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Some(vec![part(shown, arrays)?]));
    }
    if shards.is_empty() {
        return Ok(None);
    }
    let parts = shards
        .iter()
        .map(|file| part(file.display().to_string(), locate_safetensors(file)?))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(parts))
}

/// Whether the arrays are dense rows (a target and a draft by name), not
/// the sparse format or rows of top-k entries, which are read whole.
fn with_arrays_names_are_dense(names: &[String]) -> bool {
    let has = |candidates: &[&str]| candidates.iter().any(|c| names.iter().any(|n| n == c));
    has(&crate::read::TARGET_NAMES)
        && has(&crate::read::DRAFT_NAMES)
        && !crate::read::is_top_k(names)
        && !names.iter().any(|n| n == "p_tail")
}
