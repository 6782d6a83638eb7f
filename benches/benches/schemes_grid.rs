//! The schemes grid: the convex solver on real rows for every draft scheme
//! it solves, the draft truncated to its top k tokens: i.i.d. and without
//! replacement against the closed-form alpha*, independent drafts (the
//! draft at two temperatures, 0.7 and 1.3, taken in turn) as the width of
//! the certified interval. Per cell: mean time per solve, success rate,
//! the largest |acceptance - alpha*| (iid, wor) or interval width
//! (independent), and the most iterations.
//!
//! One solve per row and cell is the measurement (criterion's repeated
//! sampling of the full-vocabulary solves would repeat the slowest cells
//! many times over; `convex.rs` holds the criterion benchmarks). Uses the 64 rows of `../shared/data` when
//! present, else the repository's 8. Narrow it with
//! `GRID_SCHEMES=wor GRID_K=100,1000 GRID_N=4 GRID_ROWS=8`.
//!
//! `cargo bench -p mdsd-benches --bench schemes_grid`

use std::time::{Duration, Instant};

use mdsd_benches::grid_problem;
use mdsd_bounds::optimal_acceptance;
use mdsd_convex::ConvexSolver;
use mdsd_core::{SchemeKind, Solve};

fn list<T: std::str::FromStr>(name: &str, default: &str) -> Vec<T> {
    (std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(','))
    .map(|x| x.trim().parse().unwrap_or_else(|_| panic!("{name}: {x}")))
    .collect()
}

fn main() {
    let mut rows = mdsd_benches::shared_rows().unwrap_or_else(mdsd_benches::real_rows);
    rows.truncate(list("GRID_ROWS", &rows.len().to_string())[0]);
    println!("{} real rows, V = {}", rows.len(), rows[0].0.len());
    println!(
        "| scheme | k | n | ms per solve | success | max abs(acceptance - alpha*) or width \
         | max iterations |"
    );
    println!("|---|---|---|---|---|---|---|");
    // One solver for every solve: it keeps its memory between solves.
    let solver = ConvexSolver::default();
    for scheme in list::<SchemeKind>("GRID_SCHEMES", "iid,wor,independent") {
        for k in list::<usize>("GRID_K", "100,1000,151936") {
            for n in list::<usize>("GRID_N", "2,4") {
                let (mut time, mut solved, mut worst, mut iterations) =
                    (Duration::ZERO, 0, 0.0f64, 0);
                for (p, q) in &rows {
                    let problem = grid_problem(p, q, scheme, k, n);
                    let start = Instant::now();
                    let solution = solver.solve(&problem);
                    time += start.elapsed();
                    let Ok(solution) = solution else { continue };
                    let summary = solution.summary;
                    // Independent drafts: the interval's width; the others
                    // against the closed form.
                    let reference = match scheme {
                        SchemeKind::Independent => summary.alpha_star,
                        _ => optimal_acceptance(&problem).unwrap().alpha_star,
                    };
                    solved += 1;
                    worst = worst.max((reference - summary.acceptance).abs());
                    iterations = iterations.max(summary.iterations);
                }
                println!(
                    "| {scheme} | {k} | {n} | {:.2} | {solved}/{} | {worst:.1e} | {iterations} |",
                    time.as_secs_f64() * 1e3 / rows.len() as f64,
                    rows.len(),
                );
            }
        }
    }
}
