//! A backend-neutral sparse LP (variables >= 0) and the one function that
//! hands it to a good_lp solver.

use good_lp::{Expression, ProblemVariables, Solution, SolverModel, variable};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowKind {
    Equal,
    AtMost,
}

/// `Σ c x[var] over terms (var, c), (= or <=) rhs`.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub terms: Vec<(usize, f64)>,
    pub kind: RowKind,
    pub rhs: f64,
}

/// maximise `Σ c x[var]` over the objective's terms subject to `rows`,
/// `x >= 0`.
#[derive(Debug, Clone, Default)]
pub(crate) struct LinearProgram {
    pub variables: usize,
    pub objective: Vec<(usize, f64)>,
    pub rows: Vec<Row>,
}

impl LinearProgram {
    /// `Σ x[vars] (= or <=) rhs`: all coefficients 1.
    pub(crate) fn row(&mut self, vars: Vec<usize>, kind: RowKind, rhs: f64) {
        self.weighted_row(vars.into_iter().map(|i| (i, 1.0)).collect(), kind, rhs);
    }

    pub(crate) fn weighted_row(&mut self, terms: Vec<(usize, f64)>, kind: RowKind, rhs: f64) {
        self.rows.push(Row { terms, kind, rhs });
    }

    /// The objective at `x`.
    pub(crate) fn value(&self, x: &[f64]) -> f64 {
        self.objective.iter().map(|&(i, c)| c * x[i]).sum()
    }

    /// Solves with any good_lp solver and returns the variable values, or the
    /// solver's own error message.
    pub(crate) fn solve_with<S>(&self, solver: S) -> Result<Vec<f64>, String>
    where
        S: good_lp::Solver,
        <S::Model as SolverModel>::Error: std::fmt::Display,
    {
        let mut vars = ProblemVariables::new();
        let x = vars.add_vector(variable().min(0.0), self.variables);
        let objective: Expression = self.objective.iter().map(|&(i, c)| c * x[i]).sum();
        let mut model = vars.maximise(objective).using(solver);
        for row in &self.rows {
            let lhs: Expression = row.terms.iter().map(|&(i, c)| c * x[i]).sum();
            model = model.with(match row.kind {
                RowKind::Equal => good_lp::constraint::eq(lhs, row.rhs),
                RowKind::AtMost => good_lp::constraint::leq(lhs, row.rhs),
            });
        }
        let solution = model.solve().map_err(|e| e.to_string())?;
        Ok(x.iter().map(|&v| solution.value(v)).collect())
    }
}
