//! Every verifier, by name: one enum, so that a name, the schemes it
//! supports, its constructor and its closed-form acceptance cannot exist in
//! one place and not another.

use std::fmt;
use std::str::FromStr;

use mdsd_convex::ConvexSolver;
use mdsd_core::{Problem, Progress, SchemeKind, Solve};
use mdsd_flow::FlowSolver;

use crate::acceptance::{kseq_acceptance, naive_acceptance, nss_acceptance, specinfer_acceptance};
use crate::{
    Deterministic, Greedy, KHISTI_TRUNCATION, KSeq, Khisti, Naive, Nss, OptimalConvex, OptimalFlow,
    RrsWithoutReplacement, SpecHub, SpecInfer, Verifier, VerifyError, check_draft_count,
};

/// A verifier's acceptance as [`VerifierKind::rate`] finds it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rating {
    pub acceptance: f64,
    /// The Wilson 99% interval of a sampled acceptance; `None` when exact.
    pub interval: Option<(f64, f64)>,
}

/// What preparing a verifier may be told beyond the problem.
#[derive(Debug, Clone)]
pub struct VerifierSettings {
    /// Khisti et al.'s truncation: pairs among this many most likely draft
    /// tokens are weighted by the LP (1 to [`crate::KHISTI_MAX_TRUNCATION`]).
    pub khisti_truncation: usize,
    /// The convex solver `optimal-convex` solves with (its budget: target
    /// gap and time limit).
    pub convex: ConvexSolver,
    /// The max-flow solver `optimal-flow` solves with (its budget of draft
    /// sets).
    pub flow: FlowSolver,
}

impl Default for VerifierSettings {
    fn default() -> Self {
        Self {
            khisti_truncation: KHISTI_TRUNCATION,
            convex: ConvexSolver::default(),
            flow: FlowSolver::default(),
        }
    }
}

/// The built-in token-level verifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerifierKind {
    /// [`Nss`]: ignores the drafts.
    Nss,
    /// [`Naive`]: verifies the first draft alone.
    Naive,
    /// [`SpecInfer`]: recursive rejection sampling.
    SpecInfer,
    /// [`RrsWithoutReplacement`]: recursive rejection sampling of drafts
    /// drawn without replacement.
    RrsWithoutReplacement,
    /// [`KSeq`]: SpecTr's K-SEQ.
    KSeq,
    /// [`SpecHub`]: on its own hub drafts.
    SpecHub,
    /// [`Khisti`]: Khisti et al.'s importance-sampling selection.
    Khisti,
    /// [`Greedy`]: Hu et al.'s verifier of their greedy drafts.
    Greedy,
    /// [`Deterministic`]: the verifier of argmax and top drafts.
    Deterministic,
    /// [`OptimalFlow`]: the optimal plan of max flow.
    OptimalFlow,
    /// [`OptimalConvex`]: the optimal selection rule of the convex solver.
    OptimalConvex,
}

impl VerifierKind {
    /// The settings of [`VerifierSettings`] this verifier's preparation
    /// reads, by the names the command line and Python give them
    /// (`truncation`, `max_gap` and `budget_ms`, `max_sets`).
    pub fn settings_read(self) -> &'static [&'static str] {
        match self {
            VerifierKind::Khisti => &["truncation"],
            VerifierKind::OptimalConvex => &["max_gap", "budget_ms"],
            VerifierKind::OptimalFlow => &["max_sets"],
            _ => &[],
        }
    }

    /// Every verifier, in report order.
    pub const ALL: [VerifierKind; 11] = [
        VerifierKind::Nss,
        VerifierKind::Naive,
        VerifierKind::SpecInfer,
        VerifierKind::RrsWithoutReplacement,
        VerifierKind::KSeq,
        VerifierKind::SpecHub,
        VerifierKind::Khisti,
        VerifierKind::Greedy,
        VerifierKind::Deterministic,
        VerifierKind::OptimalFlow,
        VerifierKind::OptimalConvex,
    ];

    /// The name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            VerifierKind::Nss => "nss",
            VerifierKind::Naive => "naive",
            VerifierKind::SpecInfer => "specinfer",
            VerifierKind::RrsWithoutReplacement => "rrs-wor",
            VerifierKind::KSeq => "kseq",
            VerifierKind::SpecHub => "spechub",
            VerifierKind::Khisti => "khisti",
            VerifierKind::Greedy => "greedy",
            VerifierKind::Deterministic => "deterministic",
            VerifierKind::OptimalFlow => "optimal-flow",
            VerifierKind::OptimalConvex => "optimal-convex",
        }
    }

    /// The draft schemes the verifier is defined for.
    pub fn schemes(self) -> &'static [SchemeKind] {
        use SchemeKind::{Argmax, Greedy, Hub, Iid, Independent, Top, WithoutReplacement};
        match self {
            VerifierKind::Nss | VerifierKind::Naive | VerifierKind::OptimalFlow => &SchemeKind::ALL,
            VerifierKind::SpecInfer | VerifierKind::Khisti => &[Iid, Independent],
            VerifierKind::OptimalConvex => &[Iid, WithoutReplacement, Independent],
            VerifierKind::RrsWithoutReplacement => &[WithoutReplacement],
            VerifierKind::KSeq => &[Iid],
            VerifierKind::SpecHub => &[Hub],
            VerifierKind::Greedy => &[Greedy],
            VerifierKind::Deterministic => &[Argmax, Top],
        }
    }

    pub fn supports(self, scheme: SchemeKind) -> bool {
        self.schemes().contains(&scheme)
    }

    /// [`VerifyError::Unsupported`] unless the verifier supports `scheme`.
    pub fn check_scheme(self, scheme: SchemeKind) -> Result<(), VerifyError> {
        if self.supports(scheme) {
            return Ok(());
        }
        Err(VerifyError::Unsupported {
            verifier: self.name(),
            scheme,
            supported: self
                .schemes()
                .iter()
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Prepares the verifier for a problem with the default settings
    /// (Khisti's truncation of 15 tokens, the solvers' defaults).
    pub fn prepare(self, problem: &Problem) -> Result<Box<dyn Verifier>, VerifyError> {
        self.prepare_with(problem, &VerifierSettings::default())
    }

    /// Prepares the verifier for a problem with `settings` (each verifier
    /// reads the ones that concern it).
    pub fn prepare_with(
        self,
        problem: &Problem,
        settings: &VerifierSettings,
    ) -> Result<Box<dyn Verifier>, VerifyError> {
        self.check_scheme(problem.drafts().kind())?;
        check_draft_count(problem)?;
        Ok(match self {
            VerifierKind::Nss => Box::new(Nss::new(problem)),
            VerifierKind::Naive => Box::new(Naive::new(problem)),
            VerifierKind::SpecInfer => Box::new(SpecInfer::new(problem)),
            VerifierKind::RrsWithoutReplacement => Box::new(RrsWithoutReplacement::new(problem)),
            VerifierKind::KSeq => Box::new(KSeq::new(problem)),
            VerifierKind::SpecHub => Box::new(SpecHub::new(problem)),
            VerifierKind::Khisti => Box::new(Khisti::new(problem, settings.khisti_truncation)?),
            VerifierKind::Greedy => Box::new(Greedy::new(problem)),
            VerifierKind::Deterministic => Box::new(Deterministic::new(problem)),
            VerifierKind::OptimalFlow => Box::new(OptimalFlow::from_plan(
                settings.flow.solve(problem)?.plan,
                problem.drafts().n(),
            )),
            VerifierKind::OptimalConvex => Box::new(OptimalConvex::new(problem, &settings.convex)?),
        })
    }

    /// The draft scheme a verifier is rated on where the scheme is not
    /// given (`mdsd eval`, `mdsd.evaluate`): the first of iid, wor, greedy,
    /// top it supports.
    pub fn rated_scheme(self) -> Option<SchemeKind> {
        [
            SchemeKind::Iid,
            SchemeKind::WithoutReplacement,
            SchemeKind::Greedy,
            SchemeKind::Top,
        ]
        .into_iter()
        .find(|&scheme| self.supports(scheme))
    }

    /// A verifier and the scheme it is rated on, from `name` (its
    /// [`Self::rated_scheme`]) or `name@scheme` (`optimal-convex@wor`,
    /// `khisti@independent`).
    pub fn parse_rated(spec: &str) -> Result<(Self, SchemeKind), VerifyError> {
        let (name, scheme) = match spec.split_once('@') {
            Some((name, scheme)) => (name, Some(scheme)),
            None => (spec, None),
        };
        let kind: Self = name.parse()?;
        let scheme = match scheme {
            Some(scheme) => scheme.parse::<SchemeKind>()?,
            None => kind.rated_scheme().ok_or(VerifyError::Unsupported {
                verifier: kind.name(),
                scheme: SchemeKind::Iid,
                supported: format!(
                    "{}; name the scheme as `{}@SCHEME`",
                    kind.schemes()
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                    kind.name()
                ),
            })?,
        };
        kind.check_scheme(scheme)?;
        Ok((kind, scheme))
    }

    /// The verifier's acceptance on `problem`: exact from its closed form
    /// where it has one ([`Self::exact_acceptance`]), else the estimate of
    /// `draws` seeded draws with its Wilson 99% interval, `progress`
    /// called as in [`crate::sampled_with_progress`] (and once with
    /// `draws` for an exact one).
    pub fn rate(
        self,
        problem: &Problem,
        convex: &ConvexSolver,
        draws: u64,
        seed: u64,
        progress: &dyn Progress,
    ) -> Result<Rating, VerifyError> {
        if let Some(acceptance) = self.exact_acceptance(problem, convex) {
            progress.advance(draws);
            return Ok(Rating {
                acceptance: acceptance?,
                interval: None,
            });
        }
        let verifier = self.prepare(problem)?;
        let report =
            crate::sampled_with_progress(problem, verifier.as_ref(), draws, seed, progress)?;
        Ok(Rating {
            acceptance: report.acceptance,
            interval: Some(report.acceptance_interval),
        })
    }

    /// The exact acceptance without enumerating drafts, where a closed form
    /// (or the convex solver's r) gives it; `None` for the others, which
    /// the harnesses rate. `convex` solves for `optimal-convex` (holding
    /// its memory between calls).
    pub fn exact_acceptance(
        self,
        problem: &Problem,
        convex: &ConvexSolver,
    ) -> Option<Result<f64, VerifyError>> {
        if let Err(e) = self
            .check_scheme(problem.drafts().kind())
            .and_then(|()| check_draft_count(problem))
        {
            return Some(Err(e));
        }
        let scheme = problem.drafts().kind();
        Some(match self {
            // Inclusion probabilities without replacement, and the hub's
            // second draft given its first, have no closed form: the
            // harnesses rate those.
            VerifierKind::Nss if scheme == SchemeKind::WithoutReplacement => return None,
            VerifierKind::Naive
                if matches!(scheme, SchemeKind::WithoutReplacement | SchemeKind::Hub) =>
            {
                return None;
            }
            VerifierKind::Nss => nss_acceptance(problem),
            VerifierKind::Naive => naive_acceptance(problem),
            VerifierKind::SpecInfer => specinfer_acceptance(problem),
            VerifierKind::KSeq => kseq_acceptance(problem).map(|(acceptance, _)| acceptance),
            // p(S) of the deterministic draft set S.
            VerifierKind::Deterministic => Ok(problem
                .drafts()
                .fixed_tokens()
                .iter()
                .map(|&x| problem.target().prob(x))
                .sum()),
            // Under a time limit a second solve need not reach the prepared
            // rule's iterate, and the selected token's acceptance is only a
            // lower bound short of the optimum: the harnesses rate it.
            VerifierKind::OptimalConvex if convex.budget().time_limit.is_some() => return None,
            VerifierKind::OptimalConvex => convex
                .solve(problem)
                .map(|solution| solution.summary.acceptance)
                .map_err(Into::into),
            VerifierKind::RrsWithoutReplacement
            | VerifierKind::SpecHub
            | VerifierKind::Khisti
            | VerifierKind::Greedy
            | VerifierKind::OptimalFlow => return None,
        })
    }
}

impl fmt::Display for VerifierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for VerifierKind {
    type Err = VerifyError;

    fn from_str(name: &str) -> Result<Self, VerifyError> {
        VerifierKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| VerifyError::UnknownVerifier { name: name.into() })
    }
}
