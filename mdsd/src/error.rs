//! [`Error`]: everything that can go wrong in what a command computes, one
//! line each, the same for the command line (which exits 2 on it) and the
//! Python module (which raises `MdsdError`).

use mdsd_bounds::BoundError;
use mdsd_convex::ConvexError;
use mdsd_core::{CoreError, Method};
use mdsd_flow::FlowError;
use mdsd_logits::LogitsError;
use mdsd_lp::LpError;
use mdsd_verify::VerifyError;
use thiserror::Error;

/// Everything that can go wrong, one line each.
#[derive(Debug, Error)]
pub enum Error {
    #[error("{arg}: {source}")]
    Input {
        arg: String,
        source: Box<LogitsError>,
    },
    #[error("{what}: {source}")]
    Invalid { what: String, source: CoreError },
    #[error("{0}")]
    Usage(String),
    #[error("{flag} {value} is invalid: it must be {expected}")]
    Setting {
        flag: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("row {row}: {source}")]
    Solve {
        row: usize,
        source: Box<dyn std::error::Error + Send + Sync>,
        instead: &'static [Method],
    },
    #[error("cannot write {path}: {message}")]
    Output { path: String, message: String },
    #[error("{0}")]
    Verify(Box<VerifyError>),
    #[error("{0}")]
    Logits(Box<LogitsError>),
}

impl Error {
    /// Whether this is the caller's own stop ([`CoreError::Stopped`], a
    /// Ctrl-C): it ends a run, and is never a row that failed.
    pub fn is_stop(&self) -> bool {
        match self {
            Error::Invalid { source, .. } => stopped(source),
            Error::Verify(e) => stopped(e.as_ref()),
            Error::Solve { source, .. } => stopped(source.as_ref()),
            _ => false,
        }
    }

    /// The commands that scale where this error refused an instance, as a
    /// user runs them.
    pub fn instead(&self) -> Vec<&'static str> {
        let methods = match self {
            Error::Solve { instead, .. } => instead,
            Error::Invalid { source, .. } => source.instead(),
            Error::Verify(e) => e.instead(),
            _ => &[],
        };
        methods
            .iter()
            .map(|method| match method {
                Method::ClosedForm => "`mdsd bound`",
                Method::MaxFlow => "`mdsd solve --method flow`",
                Method::Convex => "`mdsd solve --method convex`",
                Method::BlockVerification => "`mdsd block --methods bv,gbv`",
                Method::Sampling => "`--samples N`",
            })
            .collect()
    }
}

/// Whether `error` is the caller's stop, itself or as the invalid input
/// a library error wraps (the convex solver's, or a verifier's).
fn stopped(error: &(dyn std::error::Error + 'static)) -> bool {
    let invalid = if let Some(e) = error.downcast_ref::<CoreError>() {
        Some(e)
    } else if let Some(e) = error.downcast_ref::<VerifyError>() {
        match e {
            VerifyError::Invalid(e) | VerifyError::Convex(ConvexError::Invalid(e)) => Some(e),
            _ => None,
        }
    } else if let Some(ConvexError::Invalid(e)) = error.downcast_ref::<ConvexError>() {
        Some(e)
    } else {
        None
    };
    matches!(invalid, Some(CoreError::Stopped))
}

/// The library errors a solve can end in, as the command line reports them.
pub trait SolveError: std::error::Error + Send + Sync + Sized + 'static {
    fn instead(&self) -> &'static [Method];
    /// The invalid input inside, if that is what the error is.
    fn invalid(&self) -> Option<&CoreError>;

    /// The error of row `row`.
    fn at_row(self, row: usize) -> Error {
        let instead = self.instead();
        Error::Solve {
            row,
            source: Box::new(self),
            instead,
        }
    }

    /// A bad setting as the flag that set it, any other error as is.
    fn into_setting_error(self) -> Error {
        match self.invalid() {
            Some(CoreError::InvalidSetting {
                setting,
                value,
                expected,
            }) => Error::Setting {
                flag: match *setting {
                    "max_gap" => "--max-gap",
                    "budget_ms" => "--budget-ms",
                    "max_variables" => "--max-variables",
                    "max_sets" => "--max-sets",
                    other => other,
                },
                value: value.clone(),
                expected,
            },
            _ => self.at_row(0),
        }
    }
}

macro_rules! solve_error {
    ($type:ident) => {
        impl SolveError for $type {
            fn instead(&self) -> &'static [Method] {
                $type::instead(self)
            }

            fn invalid(&self) -> Option<&CoreError> {
                match self {
                    $type::Invalid(e) => Some(e),
                    _ => None,
                }
            }
        }
    };
}
solve_error!(BoundError);
solve_error!(LpError);
solve_error!(FlowError);
solve_error!(ConvexError);

impl From<VerifyError> for Error {
    fn from(source: VerifyError) -> Self {
        Error::Verify(Box::new(source))
    }
}

impl From<LogitsError> for Error {
    fn from(source: LogitsError) -> Self {
        Error::Logits(Box::new(source))
    }
}
