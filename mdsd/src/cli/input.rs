//! The inputs every command reads, declared once: `-p`/`-q` arguments or a
//! `--data` file, what their rows hold, the transforms, and which rows.
//! Everything is read through mdsd-logits.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;
use mdsd::logits::{
    LogitsError, Matrix, Pairs, ReadOptions, RowSelection, Values, read_argument_pairs, read_pairs,
};
use mdsd::{Distribution, DraftScheme, Problem, SchemeKind, Transform};

use super::CliError;

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
    /// with --scheme independent.
    #[arg(
        short = 'q',
        long = "draft",
        value_name = "Q",
        allow_hyphen_values = true
    )]
    drafts: Vec<OsString>,
    /// A data file holding target and draft rows instead of -p/-q: a .npz
    /// or .safetensors file (dense [rows, V], or the sparse-with-tail
    /// format), or a directory of .npy files (p_target.npy, q_draft.npy).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["target", "drafts"])]
    data: Option<PathBuf>,
    /// The rows hold logits (default: probabilities for -p/-q; decided
    /// from array names and values for --data).
    #[arg(long, conflicts_with = "probabilities")]
    logits: bool,
    /// The rows hold probabilities.
    #[arg(long)]
    probabilities: bool,
    /// Temperature applied to target and drafts (0 = argmax).
    #[arg(long, allow_hyphen_values = true)]
    temperature: Option<f64>,
    /// Keep the k most likely tokens of target and drafts.
    #[arg(long)]
    top_k: Option<usize>,
    /// Keep the smallest most-likely set of mass >= p of target and drafts.
    #[arg(long)]
    top_p: Option<f64>,
    /// The first row to use.
    #[arg(long, value_name = "R", default_value_t = 0)]
    pub row: usize,
    /// How many rows to use from --row (default: all the rest).
    #[arg(long, value_name = "N")]
    pub rows: Option<usize>,
}

impl InputArgs {
    /// The transform of --temperature, --top-k and --top-p.
    pub fn transform(&self) -> Transform {
        Transform {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
        }
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

    /// The rows of --data or of -p/-q, unselected.
    pub fn read_all(&self) -> Result<Pairs, CliError> {
        if let Some(path) = &self.data {
            let options = ReadOptions {
                values: self.values(),
            };
            return Ok(read_pairs(path, &options)?);
        }
        let (Some(target), false) = (&self.target, self.drafts.is_empty()) else {
            return Err(CliError::Usage(
                "this command needs -p and -q (target and draft), or --data FILE".into(),
            ));
        };
        read_argument_pairs(target, &self.drafts, self.values()).map_err(|error| match error {
            LogitsError::InArgument { role, source } => CliError::Input {
                arg: if role == "target" { "-p" } else { "-q" }.into(),
                source,
            },
            other => other.into(),
        })
    }

    /// The rows of --data or of -p/-q, as --row and --rows select them.
    pub fn read(&self) -> Result<Pairs, CliError> {
        self.select(self.read_all()?)
    }

    /// The rows of `pairs` that --row and --rows select; none is an error
    /// (a mean over no row is no number).
    pub fn select(&self, pairs: Pairs) -> Result<Pairs, CliError> {
        if self.rows == Some(0) {
            return Err(CliError::Setting {
                flag: "--rows",
                value: "0".into(),
                expected: "at least 1 (it selects no row)",
            });
        }
        if pairs.rows() == 0 {
            return Err(CliError::Usage(format!("{} holds no row", pairs.source)));
        }
        let selection = RowSelection {
            first: self.row,
            count: self.rows,
        };
        if selection == RowSelection::default() {
            return Ok(pairs);
        }
        Ok(pairs.select(selection)?)
    }

    /// How a row is named in messages: by its flag for -p/-q, by its role
    /// for --data; with its number when there are several.
    fn label(&self, role: Role, row: usize, rows: usize) -> String {
        let name = match (self.data.is_some(), role) {
            (true, Role::Target) => "target".to_string(),
            (true, Role::Draft(_)) => "draft".to_string(),
            (false, Role::Target) => "-p".to_string(),
            (false, Role::Draft(i)) if self.drafts.len() > 1 => format!("-q #{}", i + 1),
            (false, Role::Draft(_)) => "-q".to_string(),
        };
        if rows > 1 {
            format!("{name} row {}", self.row + row)
        } else {
            name
        }
    }

    /// Row `row` of `rows` as a distribution after the transforms.
    pub fn distribution(
        &self,
        pairs: &Pairs,
        role: Role,
        row: usize,
    ) -> Result<Distribution, CliError> {
        let matrix: &Matrix = match role {
            Role::Target => &pairs.target,
            Role::Draft(0) => &pairs.draft,
            Role::Draft(i) => &pairs.more_drafts[i - 1],
        };
        pairs
            .values
            .distribution(matrix.row(row), &self.transform())
            .map_err(|source| CliError::Invalid {
                what: self.label(role, row, pairs.rows()),
                source,
            })
    }

    /// One problem per row: the target against `n` drafts of `scheme`
    /// (one draft row per draft model for independent drafts).
    pub fn problems(&self, scheme: SchemeKind, n: usize) -> Result<Vec<Problem>, CliError> {
        let pairs = self.read()?;
        let draft_models = 1 + pairs.more_drafts.len();
        let independent = scheme == SchemeKind::Independent;
        if independent && draft_models != n {
            return Err(CliError::Usage(format!(
                "--scheme independent takes -q once per draft model: got {draft_models} -q for n = {n}"
            )));
        }
        if !independent && draft_models != 1 {
            return Err(CliError::Usage(format!(
                "--scheme {scheme} takes one -q (got {draft_models}); repeat -q only with --scheme independent"
            )));
        }
        (0..pairs.rows())
            .map(|row| {
                let p = self.distribution(&pairs, Role::Target, row)?;
                let qs = (0..draft_models)
                    .map(|i| self.distribution(&pairs, Role::Draft(i), row))
                    .collect::<Result<Vec<_>, _>>()?;
                let invalid = |source| CliError::Invalid {
                    what: if pairs.rows() > 1 {
                        format!("problem row {}", self.row + row)
                    } else {
                        "problem".into()
                    },
                    source,
                };
                let drafts = DraftScheme::new(scheme, qs, n).map_err(invalid)?;
                Problem::new(p, drafts).map_err(invalid)
            })
            .collect()
    }
}

/// Which side of a pair a row is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Target,
    /// The draft model's index (0 unless drafts are independent).
    Draft(usize),
}

impl From<LogitsError> for CliError {
    fn from(source: LogitsError) -> Self {
        CliError::Logits(Box::new(source))
    }
}
