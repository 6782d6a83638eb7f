//! A backend-neutral sparse LP (all coefficients 1, variables >= 0) and the
//! one function that hands it to a good_lp solver.

use good_lp::{Expression, ProblemVariables, Solution, SolverModel, variable};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowKind {
    Equal,
    AtMost,
}

/// `Σ x[vars] (= or <=) rhs`.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub vars: Vec<usize>,
    pub kind: RowKind,
    pub rhs: f64,
}

/// maximise `Σ x[objective]` subject to `rows`, `x >= 0`.
#[derive(Debug, Clone, Default)]
pub(crate) struct LinearProgram {
    pub variables: usize,
    pub objective: Vec<usize>,
    pub rows: Vec<Row>,
}

impl LinearProgram {
    pub(crate) fn row(&mut self, vars: Vec<usize>, kind: RowKind, rhs: f64) {
        self.rows.push(Row { vars, kind, rhs });
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
        let objective: Expression = self.objective.iter().map(|&i| x[i]).sum();
        let mut model = vars.maximise(objective).using(solver);
        for row in &self.rows {
            let lhs: Expression = row.vars.iter().map(|&i| x[i]).sum();
            model = model.with(match row.kind {
                RowKind::Equal => good_lp::constraint::eq(lhs, row.rhs),
                RowKind::AtMost => good_lp::constraint::leq(lhs, row.rhs),
            });
        }
        let solution = model.solve().map_err(|e| e.to_string())?;
        Ok(x.iter().map(|&v| solution.value(v)).collect())
    }
}
