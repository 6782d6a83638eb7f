//! The convex grid: both convex methods (enumeration-free
//! `ConvexSolver`, and the `GlobalResolution` baseline) on real rows, the
//! draft truncated to its top k tokens, for k in {10, 100, 1000, 151936}
//! and n in {2, 4, 8}: mean setup time per token, success rate, largest
//! |alpha - alpha*| among successes, and the closed-form alpha* (the
//! same-run baseline: the optimum's value without a verifier).
//!
//! One solve per row and cell is the measurement (768 solves per method,
//! too many for criterion's repeated sampling; `convex.rs` holds the
//! criterion benchmarks). Uses the 64 rows of `../shared/data` when
//! present, else the repository's 8. Narrow it with
//! `GRID_K=10,100 GRID_N=2 GRID_ROWS=8 GRID_METHODS=convex`.
//!
//! `cargo bench -p mdsd-benches --bench convex_grid`

use std::time::{Duration, Instant};

use mdsd_bounds::optimal_acceptance;
use mdsd_convex::{ConvexSolver, GlobalResolution};
use mdsd_core::{DraftScheme, Problem, Solution, Solve};

fn list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name).map_or_else(
        |_| default.to_vec(),
        |s| {
            s.split(',')
                .map(|x| x.trim().parse().expect(name))
                .collect()
        },
    )
}

/// Per cell: time, successes, worst |alpha - alpha*|, most iterations.
#[derive(Default)]
struct Cell {
    time: Duration,
    solved: usize,
    worst: f64,
    iterations: usize,
}

impl Cell {
    fn add(&mut self, time: Duration, outcome: Option<(f64, f64, usize)>) {
        self.time += time;
        if let Some((alpha, alpha_star, iterations)) = outcome {
            self.solved += 1;
            self.worst = self.worst.max((alpha - alpha_star).abs());
            self.iterations = self.iterations.max(iterations);
        }
    }
}

/// (acceptance, alpha*, iterations) of a solve.
fn outcome(summary: &mdsd_core::Summary) -> (f64, f64, usize) {
    (summary.acceptance, summary.alpha_star, summary.iterations)
}

fn main() {
    let mut rows = mdsd_benches::shared_rows().unwrap_or_else(mdsd_benches::real_rows);
    rows.truncate(list("GRID_ROWS", &[rows.len()])[0]);
    let methods = std::env::var("GRID_METHODS").unwrap_or_else(|_| "convex,gr".into());
    let count = rows.len();
    println!("{count} real rows, V = {}", rows[0].0.len());
    println!(
        "| k | n | convex ms | success | max abs(alpha - alpha*) | max iterations \
         | GR ms | GR success | GR max abs(alpha - alpha*) | closed form ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    // One solver for every solve, as a caller that solves row after row
    // holds one: it keeps its memory between solves.
    let (convex_solver, gr_solver) = (ConvexSolver::default(), GlobalResolution::default());
    for k in list("GRID_K", &[10, 100, 1000, 151_936]) {
        for n in list("GRID_N", &[2, 4, 8]) {
            let (mut convex, mut gr, mut closed) =
                (Cell::default(), Cell::default(), Duration::ZERO);
            for (p, q) in &rows {
                let problem =
                    Problem::new(p.clone(), DraftScheme::iid(q.top_k(k).unwrap(), n).unwrap())
                        .unwrap();
                let start = Instant::now();
                let bound = optimal_acceptance(&problem).unwrap();
                closed += start.elapsed();
                std::hint::black_box(bound);
                if methods.contains("convex") {
                    let start = Instant::now();
                    let solution = convex_solver.solve(&problem);
                    let outcome = solution.ok().map(|s| outcome(s.summary()));
                    convex.add(start.elapsed(), outcome);
                }
                if methods.contains("gr") {
                    let start = Instant::now();
                    let solution = gr_solver.solve(&problem);
                    let outcome = solution.ok().map(|s| outcome(s.summary()));
                    gr.add(start.elapsed(), outcome);
                }
            }
            let ms = |d: Duration| d.as_secs_f64() * 1e3 / count as f64;
            println!(
                "| {k} | {n} | {:.2} | {}/{count} | {:.1e} | {} | {:.2} | {}/{count} | {:.1e} | {:.2} |",
                ms(convex.time),
                convex.solved,
                convex.worst,
                convex.iterations,
                ms(gr.time),
                gr.solved,
                gr.worst,
                ms(closed),
            );
        }
    }
}
