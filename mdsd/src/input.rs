//! [`Input`]: what every command reads, declared once: `-p`/`-q` arguments
//! or a `--data` file, what their rows hold, the transforms, and which rows;
//! read whole or a window at a time through mdsd-logits. The command line
//! fills it from its flags, the Python module from its keywords.

use std::ffi::OsString;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::str::FromStr;

use rayon::prelude::*;

use crate::core::Shown;
use crate::core::{CoreError, Side};
use crate::logits::{
    DraftVocabMap, LogitsError, Matrix, Pairs, ReadOptions, RowReader, RowSelection, Values,
    VocabularyCut, VocabularyOptions, read_argument_pairs, read_pairs,
};
use crate::{Distribution, DraftScheme, Problem, SchemeKind, Transform};
use serde_json::json;

use crate::error::Error;

/// The rows a command reads and how: the command line's input flags, one
/// field each (their docs name the flags).
#[derive(Debug, Clone, Default)]
pub struct Input {
    /// Target distribution: `0.5,0.3,0.2`, a .npy file (1-D, or 2-D with
    /// one problem per row; float16/32/64) or a .json file (array, or array
    /// of arrays).
    pub target: Option<OsString>,
    /// Draft distribution, same forms as -p; repeat once per draft model
    /// with --scheme independent (draft i from the (i mod m)-th of m).
    pub drafts: Vec<OsString>,
    /// A data file holding target and draft rows instead of -p/-q: a .npz
    /// or .safetensors file (dense [..., V]: every leading axis indexes
    /// rows, as Hugging Face's [batch, positions, V]; or the
    /// sparse-with-tail format), or a directory of .npy files
    /// (p_target.npy, q_draft.npy).
    pub data: Option<PathBuf>,
    /// The draft arrays of --data by name, one per draft model, for
    /// --scheme independent (`q_small,q_large`; draft i from the
    /// (i mod m)-th of m); by default the one draft array (q, q_draft,
    /// draft or draft_logits).
    pub draft_arrays: Vec<String>,
    /// The rows hold logits (default: probabilities for -p/-q; decided
    /// from array names and values for --data).
    pub logits: bool,
    /// The rows hold probabilities.
    pub probabilities: bool,
    /// Cut target and draft rows to their first N tokens (pairs whose
    /// logit rows are padded to different lengths). A cut that drops more
    /// than 1e-6 of either side's probability in any row is refused.
    pub vocab: Option<usize>,
    /// Cut with --vocab even where it drops more than 1e-6 (rows are
    /// renormalised to the kept tokens; the mass dropped is reported).
    pub allow_truncation: bool,
    /// The draft's vocabulary as target ids: a 1-D integer .npy with one
    /// entry per draft token (EAGLE-3's reduced draft vocabularies); the
    /// draft has probability 0 on target tokens outside it.
    pub draft_vocab_map: Option<PathBuf>,
    /// The --draft-vocab-map entries are offsets (target id = draft id +
    /// entry), as EAGLE-3's `d2t` tables hold them.
    pub draft_vocab_map_offsets: bool,
    /// Temperature applied to target and drafts (0 = argmax).
    pub temperature: Option<f64>,
    /// Keep the k most likely tokens of target and drafts.
    pub top_k: Option<usize>,
    /// Keep the smallest most-likely set of mass >= p of target and drafts.
    pub top_p: Option<f64>,
    /// Temperature of the drafts only (instead of --temperature for them).
    pub draft_temperature: Option<f64>,
    /// Independent drafts from the one draft row at several temperatures
    /// (`0.7,1.3`, a common way to diversify drafts): draft i at the
    /// (i mod m)-th of m; the draft's top-k and top-p apply to each. For
    /// --scheme independent (mdsd eval: that scheme's drafts, the other
    /// schemes draft at the draft's own temperature).
    pub draft_temperatures: Vec<f64>,
    /// Top-k of the drafts only (Global Resolution's published grid
    /// truncates the draft only).
    pub draft_top_k: Option<usize>,
    /// Top-p of the drafts only.
    pub draft_top_p: Option<f64>,
    /// Temperature of the target only (instead of --temperature for it).
    pub target_temperature: Option<f64>,
    /// Top-k of the target only (vLLM drafts the whole vocabulary while
    /// the target keeps its top-k).
    pub target_top_k: Option<usize>,
    /// Top-p of the target only.
    pub target_top_p: Option<f64>,
    /// Which rows: R (that row), A..B (rows A to B - 1) or A.. (from A).
    pub row: Option<RowSpec>,
    /// How many rows from --row R (default: all of them, or the one row
    /// --row R names).
    pub rows: Option<usize>,
}

/// `--row`: one row, or a range of rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSpec {
    pub first: usize,
    /// One past the last row of a range (`None`: to the end).
    end: Option<usize>,
    /// `A..B` or `A..` rather than one row.
    range: bool,
}

impl RowSpec {
    /// `A..B` or `A..` rather than one row.
    pub fn is_range(self) -> bool {
        self.range
    }
}

impl FromStr for RowSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let number = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{text}` is not a row R, a range A..B or A.."))
        };
        let Some((first, end)) = text.split_once("..") else {
            return Ok(Self {
                first: number(text)?,
                end: None,
                range: false,
            });
        };
        let first = if first.trim().is_empty() {
            0
        } else {
            number(first)?
        };
        let end = if end.trim().is_empty() {
            None
        } else {
            Some(number(end)?)
        };
        if end.is_some_and(|end| end <= first) {
            return Err(format!("the range `{text}` holds no row"));
        }
        Ok(Self {
            first,
            end,
            range: true,
        })
    }
}

impl fmt::Display for RowSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.range, self.end) {
            (false, _) => write!(f, "{}", self.first),
            (true, Some(end)) => write!(f, "{}..{end}", self.first),
            (true, None) => write!(f, "{}..", self.first),
        }
    }
}

/// What a temperature may be, as the transforms say it.
const TEMPERATURES: &str = "finite and >= 0 (0 means argmax)";

impl Input {
    /// The transform of one side: --temperature, --top-k and --top-p,
    /// each replaced by the side's own flag (--draft-* or --target-*)
    /// where it is given.
    pub fn transform(&self, side: Side) -> Transform {
        let own = self.own_transform(side);
        Transform {
            temperature: own.temperature.or(self.temperature),
            top_k: own.top_k.or(self.top_k),
            top_p: own.top_p.or(self.top_p),
        }
    }

    /// What the side's own flags set (--target-* or --draft-*), which
    /// replace the shared ones.
    fn own_transform(&self, side: Side) -> Transform {
        match side {
            Side::Target => Transform {
                temperature: self.target_temperature,
                top_k: self.target_top_k,
                top_p: self.target_top_p,
            },
            Side::Draft => Transform {
                temperature: self.draft_temperature,
                top_k: self.draft_top_k,
                top_p: self.draft_top_p,
            },
        }
    }

    /// Each side's transform refused by the flag that set its value
    /// (`--top-p -0.1`, `--draft-temperature nan`), before any row is read:
    /// applied to the rows, the refusal would name the rows instead.
    pub fn check_transforms(&self) -> Result<(), Error> {
        for side in [Side::Target, Side::Draft] {
            let own = self.own_transform(side);
            let flags = match side {
                Side::Target => ["--target-temperature", "--target-top-k", "--target-top-p"],
                Side::Draft => ["--draft-temperature", "--draft-top-k", "--draft-top-p"],
            };
            let shared = ["--temperature", "--top-k", "--top-p"];
            let refused = |i: usize, given: bool, value: String, expected: &'static str| {
                let flag = if given { flags[i] } else { shared[i] };
                Err(Error::Setting {
                    flag,
                    value,
                    expected,
                })
            };
            match self.transform(side).check() {
                Err(CoreError::InvalidTemperature(t)) => {
                    let given = own.temperature.is_some();
                    return refused(0, given, Shown(t).to_string(), TEMPERATURES);
                }
                Err(CoreError::InvalidTopK) => {
                    let expected = "at least 1 (top-k 0 keeps no token)";
                    return refused(1, own.top_k.is_some(), "0".into(), expected);
                }
                Err(CoreError::InvalidTopP(t)) => {
                    return refused(2, own.top_p.is_some(), Shown(t).to_string(), "in (0, 1]");
                }
                Err(other) => return Err(Error::Usage(other.to_string())),
                Ok(()) => {}
            }
        }
        Ok(())
    }

    /// The first row selected, for messages and positional rows.
    pub fn first_row(&self) -> usize {
        self.row.map_or(0, |row| row.first)
    }

    /// How the rows are read: what they hold and the vocabulary flags.
    fn read_options(&self) -> ReadOptions {
        ReadOptions {
            values: self.values(),
            vocabulary: VocabularyOptions {
                cut: self.vocab,
                allow_truncation: self.allow_truncation,
                draft_map: self.draft_vocab_map.clone().map(|path| DraftVocabMap {
                    path,
                    offsets: self.draft_vocab_map_offsets,
                }),
            },
            draft_arrays: self.draft_arrays.clone(),
        }
    }

    /// The draft laws of independent drafts, taken in turn: the draft row
    /// at each --draft-temperatures value, else each draft row (-q
    /// repeated, --draft-arrays) with the draft's transform; as (the
    /// draft row's model, its transform). `draft_models` is how many
    /// draft rows were read.
    pub fn draft_laws(&self, draft_models: usize) -> Result<Vec<(usize, Transform)>, Error> {
        let transform = self.transform(Side::Draft);
        if self.draft_temperatures.is_empty() {
            return Ok((0..draft_models).map(|i| (i, transform)).collect());
        }
        if draft_models > 1 {
            return Err(Error::Usage(format!(
                "--draft-temperatures sets the laws of one draft row, but {draft_models} were read \
                 (-q repeated or --draft-arrays)"
            )));
        }
        Ok((self.draft_temperatures.iter())
            .map(|&temperature| {
                let law = Transform {
                    temperature: Some(temperature),
                    ..transform
                };
                (0, law)
            })
            .collect())
    }

    /// What the rows hold, where the user said.
    fn values(&self) -> Option<Values> {
        match (self.logits, self.probabilities) {
            (true, _) => Some(Values::Logits),
            (_, true) => Some(Values::Probabilities),
            _ => None,
        }
    }

    /// Whether the rows come from --data.
    pub fn is_data(&self) -> bool {
        self.data.is_some()
    }

    /// Whether -p/-q or --data was given.
    pub fn given(&self) -> bool {
        self.target.is_some() || !self.drafts.is_empty() || self.data.is_some()
    }

    /// SHA-256 (hex) of what the rows were read from, for a report to
    /// name its data: the bytes of --data (a directory's files in name
    /// order, each hashed with its name), of each -p/-q file, or the text of
    /// an inline -p/-q; the built-in sample's file without inputs.
    pub fn data_sha256(&self) -> Result<String, Error> {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        let hash_file = |path: &std::path::Path, hasher: &mut Sha256| {
            let mut file = std::fs::File::open(path)?;
            std::io::copy(&mut file, hasher).map(drop)
        };
        let io = |path: &std::path::Path| {
            let path = path.display().to_string();
            move |e: std::io::Error| Error::Output {
                path: format!("the input {path}, to hash it"),
                message: e.to_string(),
            }
        };
        if let Some(data) = &self.data {
            if data.is_dir() {
                let mut files: Vec<_> = std::fs::read_dir(data)
                    .map_err(io(data))?
                    .filter_map(|entry| entry.ok().map(|e| e.path()))
                    .filter(|path| path.is_file())
                    .collect();
                files.sort();
                for file in files {
                    hasher.update(file.file_name().unwrap_or_default().as_encoded_bytes());
                    hash_file(&file, &mut hasher).map_err(io(&file))?;
                }
            } else {
                hash_file(data, &mut hasher).map_err(io(data))?;
            }
        } else if self.given() {
            for argument in self.target.iter().chain(&self.drafts) {
                let path = std::path::Path::new(argument);
                if path.is_file() {
                    hash_file(path, &mut hasher).map_err(io(path))?;
                } else {
                    hasher.update(argument.as_encoded_bytes());
                }
            }
        } else {
            hasher.update(crate::logits::SAMPLE_BYTES);
        }
        Ok(hasher
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect())
    }

    /// The rows of --data or of -p/-q, unselected.
    pub fn read_all(&self) -> Result<Pairs, Error> {
        let options = self.read_options();
        if let Some(path) = &self.data {
            return Ok(read_pairs(path, &options)?);
        }
        let (Some(target), false) = (&self.target, self.drafts.is_empty()) else {
            return Err(Error::Usage(
                "this command needs -p and -q (target and draft), or --data FILE".into(),
            ));
        };
        read_argument_pairs(target, &self.drafts, &options).map_err(|error| match error {
            LogitsError::InArgument { role, source } => Error::Input {
                arg: if role == "target" { "-p" } else { "-q" }.into(),
                source,
            },
            other => other.into(),
        })
    }

    /// The rows of --data or of -p/-q, as --row and --rows select them.
    pub fn read(&self) -> Result<Pairs, Error> {
        self.select(self.read_all()?)
    }

    /// The top-k rows of --data, selected by --row/--rows, for a file that
    /// holds only each side's top k entries. Transforms and vocabulary
    /// options need whole rows, so they are refused here.
    pub fn read_top_k(&self) -> Result<crate::logits::TopKRows, Error> {
        let Some(path) = &self.data else {
            return Err(Error::Usage("top-k rows are read from --data FILE".into()));
        };
        let whole_rows = [
            (
                "--temperature, --top-k, --top-p and their --draft-/--target- forms",
                [Side::Target, Side::Draft]
                    .iter()
                    .any(|&s| !self.transform(s).is_identity()),
            ),
            ("--vocab", self.vocab.is_some()),
            ("--draft-vocab-map", self.draft_vocab_map.is_some()),
            ("--logits", self.logits),
        ];
        if let Some((flags, _)) = whole_rows.iter().find(|(_, given)| *given) {
            return Err(Error::Usage(format!(
                "{} holds only each side's top-k entries: {flags} need whole rows",
                path.display()
            )));
        }
        let mut top_k = crate::logits::read_top_k(path)?;
        if self.rows == Some(0) || top_k.rows.is_empty() {
            return Err(Error::Usage(format!(
                "{} holds no row selected",
                top_k.source
            )));
        }
        let rows = self.selection()?.range(top_k.rows.len(), &top_k.source)?;
        top_k.rows = top_k.rows.drain(rows).collect();
        Ok(top_k)
    }

    /// The rows of `pairs` that --row and --rows select; none is an error
    /// (a mean over no row is no number).
    pub fn select(&self, pairs: Pairs) -> Result<Pairs, Error> {
        self.check_transforms()?;
        if self.rows == Some(0) {
            return Err(Error::Setting {
                flag: "--rows",
                value: "0".into(),
                expected: "at least 1 (it selects no row)",
            });
        }
        if pairs.rows() == 0 {
            return Err(Error::Usage(format!("{} holds no row", pairs.source)));
        }
        let selection = self.selection()?;
        if selection == RowSelection::default() {
            return Ok(pairs);
        }
        Ok(pairs.select(selection)?)
    }

    /// The rows --row and --rows name: --row R alone is that row, with
    /// --rows N the N rows from R; a range A..B or A.. takes no --rows.
    fn selection(&self) -> Result<RowSelection, Error> {
        let count = match (self.row, self.rows) {
            (Some(row), Some(_)) if row.range => {
                return Err(Error::Usage(format!(
                    "--row {row} is a range already; --rows N counts rows from a single --row R"
                )));
            }
            (Some(row), None) if row.range => row.end.map(|end| end - row.first),
            (Some(_), None) => Some(1),
            (_, rows) => rows,
        };
        Ok(RowSelection {
            first: self.first_row(),
            count,
        })
    }

    /// How a row is named in messages: by its flag for -p/-q, by its role
    /// for --data; with its number (`None` for the only row).
    fn label(&self, role: Role, number: Option<usize>) -> String {
        let name = match (self.data.is_some(), role) {
            (true, Role::Target) => "target".to_string(),
            (true, Role::Draft(_)) => "draft".to_string(),
            (false, Role::Target) => "-p".to_string(),
            (false, Role::Draft(i)) if self.drafts.len() > 1 => format!("-q #{}", i + 1),
            (false, Role::Draft(_)) => "-q".to_string(),
        };
        match number {
            Some(number) => format!("{name} row {number}"),
            None => name,
        }
    }

    /// Row `row` of `pairs` as a distribution after the transforms.
    pub fn distribution(
        &self,
        pairs: &Pairs,
        role: Role,
        row: usize,
    ) -> Result<Distribution, Error> {
        let number = (pairs.rows() > 1).then(|| self.first_row() + row);
        self.numbered_distribution(pairs, role, row, number)
    }

    /// [`Self::distribution`], the row named `number` in messages.
    fn numbered_distribution(
        &self,
        pairs: &Pairs,
        role: Role,
        row: usize,
        number: Option<usize>,
    ) -> Result<Distribution, Error> {
        let side = match role {
            Role::Target => Side::Target,
            Role::Draft(_) => Side::Draft,
        };
        self.transformed(pairs, role, &self.transform(side), row, number)
    }

    /// Row `row` of `role`'s rows under `transform`, named `number` in
    /// messages.
    fn transformed(
        &self,
        pairs: &Pairs,
        role: Role,
        transform: &Transform,
        row: usize,
        number: Option<usize>,
    ) -> Result<Distribution, Error> {
        let matrix: &Matrix = match role {
            Role::Target => &pairs.target,
            Role::Draft(0) => &pairs.draft,
            Role::Draft(i) => &pairs.more_drafts[i - 1],
        };
        pairs
            .values
            .distribution(matrix.row(row), transform)
            .map_err(|source| Error::Invalid {
                what: self.label(role, number),
                source,
            })
    }

    /// What was read, for reports: the source, its shape, the rows
    /// selected and what a --vocab cut dropped.
    pub fn report(&self, pairs: &Pairs) -> InputReport {
        InputReport {
            source: pairs.source.clone(),
            shape: pairs.shape.clone(),
            first_row: self.first_row(),
            rows: pairs.rows(),
            vocabulary: pairs.target.cols(),
            cut: pairs.cut.clone(),
        }
    }

    /// The rows of --data, or of -p and -q given as two `.npy` files, as a
    /// [`RowReader`] and the range selected, where they can be read a window
    /// at a time (no vocabulary cut or map, which need whole rows first);
    /// `None` otherwise.
    pub fn streamed(&self) -> Result<Option<(RowReader, Range<usize>)>, Error> {
        self.check_transforms()?;
        if self.read_options().vocabulary != VocabularyOptions::default() {
            return Ok(None);
        }
        let reader = match (&self.data, &self.target, &self.drafts[..]) {
            (Some(path), _, _) => {
                self.check_rows_count()?;
                RowReader::open(path, &self.read_options())?
            }
            // -p and -q as two .npy files of one shape.
            (None, Some(target), [draft]) => {
                let (target, draft) = (std::path::Path::new(target), std::path::Path::new(draft));
                match RowReader::open_npy_pair(target, draft, &self.read_options())? {
                    Some(reader) => {
                        self.check_rows_count()?;
                        reader
                    }
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        if reader.rows() == 0 {
            return Err(Error::Usage(format!("{} holds no row", reader.source())));
        }
        let rows = self.selection()?.range(reader.rows(), reader.source())?;
        Ok(Some((reader, rows)))
    }

    /// `--rows 0` selects no row, which is no evaluation.
    fn check_rows_count(&self) -> Result<(), Error> {
        if self.rows == Some(0) {
            return Err(Error::Setting {
                flag: "--rows",
                value: "0".into(),
                expected: "at least 1 (it selects no row)",
            });
        }
        Ok(())
    }

    /// What a streamed read covers, for reports.
    pub fn streamed_report(&self, reader: &RowReader, rows: &Range<usize>) -> InputReport {
        InputReport {
            source: reader.source().to_string(),
            shape: reader.shape().to_vec(),
            first_row: self.first_row(),
            rows: rows.len(),
            vocabulary: reader.shape().last().copied().unwrap_or(0),
            cut: None,
        }
    }

    /// `each` on the problems of the rows selected, a share of rows at a
    /// time on rayon's pool (with the number of the share's first row),
    /// its results in row order, and what was read. Streamed from --data
    /// where it can be: the pool reads and solves a window of about
    /// `window_bytes` of f64 rows (both sides) at a time, an equal share
    /// per thread, each share read, checked and solved by one thread, so
    /// that no barrier stands between reading and solving.
    pub fn map_rows<T: Send>(
        &self,
        scheme: SchemeKind,
        n: usize,
        window_bytes: usize,
        each: impl Fn(&[Problem], usize) -> Result<Vec<T>, Error> + Sync,
    ) -> Result<(Vec<T>, InputReport), Error> {
        let Some((reader, rows)) = self.streamed()? else {
            let pairs = self.read()?;
            let problems = self.problems_of(&pairs, scheme, n, self.first_row())?;
            let first = self.first_row();
            let results = problems
                .par_chunks(1)
                .enumerate()
                .map(|(row, problem)| each(problem, first + row))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok((results.into_iter().flatten().collect(), self.report(&pairs)));
        };
        let row_bytes = 16 * reader.shape().last().copied().unwrap_or(1).max(1);
        let threads = rayon::current_num_threads();
        let share = (window_bytes / row_bytes / threads).max(1);
        let window = share * threads;
        let mut results = Vec::with_capacity(rows.len());
        for start in rows.clone().step_by(window) {
            let end = rows.end.min(start + window);
            let shares: Vec<Range<usize>> = (start..end)
                .step_by(share)
                .map(|a| a..end.min(a + share))
                .collect();
            let done = shares
                .into_par_iter()
                .map(|rows| {
                    let pairs = reader.read(rows.clone())?;
                    each(
                        &self.problems_of(&pairs, scheme, n, rows.start)?,
                        rows.start,
                    )
                })
                .collect::<Result<Vec<_>, Error>>()?;
            results.extend(done.into_iter().flatten());
        }
        Ok((results, self.streamed_report(&reader, &rows)))
    }

    /// One problem per row: the target against `n` drafts of `scheme`
    /// (one draft row per draft model for independent drafts), and what
    /// was read.
    pub fn problems(
        &self,
        scheme: SchemeKind,
        n: usize,
    ) -> Result<(Vec<Problem>, InputReport), Error> {
        let pairs = self.read()?;
        let problems = self.problems_of(&pairs, scheme, n, self.first_row())?;
        Ok((problems, self.report(&pairs)))
    }

    /// The problems of `pairs`, whose first row is row `first_row` of the
    /// input (for messages).
    fn problems_of(
        &self,
        pairs: &Pairs,
        scheme: SchemeKind,
        n: usize,
        first_row: usize,
    ) -> Result<Vec<Problem>, Error> {
        let laws = self.draft_laws(1 + pairs.more_drafts.len())?;
        let independent = scheme == SchemeKind::Independent;
        if independent && laws.len() > n {
            return Err(Error::Usage(format!(
                "--scheme independent drafts each of its {} draft laws at least once: n = {n} is too few",
                laws.len()
            )));
        }
        if !independent && laws.len() != 1 {
            return Err(Error::Usage(format!(
                "--scheme {scheme} drafts from one draft law (got {}); several (-q repeated, \
                 --draft-arrays, --draft-temperatures) only with --scheme independent",
                laws.len()
            )));
        }
        // A window of a larger selection numbers its rows too.
        let several = pairs.rows() > 1 || first_row != self.first_row();
        (0..pairs.rows())
            .map(|row| {
                let number = several.then_some(first_row + row);
                let p = self.numbered_distribution(pairs, Role::Target, row, number)?;
                let qs = (laws.iter())
                    .map(|(i, law)| self.transformed(pairs, Role::Draft(*i), law, row, number))
                    .collect::<Result<Vec<_>, _>>()?;
                let invalid = |source| Error::Invalid {
                    what: number.map_or("problem".into(), |number| format!("problem row {number}")),
                    source,
                };
                let drafts = match independent {
                    true => DraftScheme::independent_cycled(&qs, n),
                    false => DraftScheme::new(scheme, qs, n),
                }
                .map_err(invalid)?;
                Problem::new(p, drafts).map_err(invalid)
            })
            .collect()
    }
}

/// What a command read: shown in its JSON as `input`, and in its table
/// where a --vocab cut dropped probability.
#[derive(Debug, Clone)]
pub struct InputReport {
    pub source: String,
    /// The target array's shape as stored.
    shape: Vec<usize>,
    /// The number of the first row selected, which tables and CSV show.
    pub first_row: usize,
    /// The rows selected.
    pub rows: usize,
    /// Tokens per row after any cut or map.
    vocabulary: usize,
    cut: Option<VocabularyCut>,
}

impl InputReport {
    /// `{"source", "shape", "first_row", "rows", "vocabulary",
    /// "vocabulary_cut"}`; the cut (null without --vocab) gives each
    /// side's largest dropped probability and its row.
    pub fn to_json(&self) -> serde_json::Value {
        let cut = self.cut.as_ref().map(|cut| {
            let most = |dropped: &[f64]| {
                let (row, mass) = VocabularyCut::most_dropped(dropped);
                json!({"max": mass, "row": self.first_row + row})
            };
            json!({
                "vocabulary": cut.vocabulary,
                "target_dropped": most(&cut.target_dropped),
                "draft_dropped": most(&cut.draft_dropped),
            })
        });
        json!({
            "source": self.source,
            "shape": self.shape,
            "first_row": self.first_row,
            "rows": self.rows,
            "vocabulary": self.vocabulary,
            "vocabulary_cut": cut,
        })
    }

    /// A line for tables saying what a --vocab cut dropped (empty
    /// without one).
    pub fn note(&self) -> String {
        let Some(cut) = &self.cut else {
            return String::new();
        };
        let most = |dropped: &[f64]| {
            let (row, mass) = VocabularyCut::most_dropped(dropped);
            format!("{} (row {})", Shown(mass), self.first_row + row)
        };
        format!(
            "--vocab {}: probability beyond token {} dropped, at most {} of the target's, {} of the draft's\n",
            cut.vocabulary,
            cut.vocabulary,
            most(&cut.target_dropped),
            most(&cut.draft_dropped)
        )
    }
}

/// Which side of a pair a row is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Target,
    /// The draft model's index (0 unless drafts are independent).
    Draft(usize),
}
