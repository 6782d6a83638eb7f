//! The budget grid: what the optimal verifier reaches inside a decoding
//! step's time. On real rows, the draft truncated to its top k tokens, for
//! each scheme the convex solver covers (independent drafts: the draft at
//! two temperatures, 0.7 and 1.3, taken in turn) and each time budget per
//! solve (`Budget::time_limit`; "none" runs to the default gap): the mean
//! milliseconds per solve, the mean acceptance reached (the selected
//! token's, Σ min(p, r), which the solution reports, and P(output among
//! the drafts) by sampling the rule, `GRID_DRAWS` draws a row, the mean's
//! 99% half-width beside it), the mean and largest gap alpha* - acceptance
//! (certified: for i.i.d. and without replacement against the closed
//! form, for independent drafts against the upper end of the solver's
//! interval), and how many solves converged before their budget ran out.
//! Then the cost of the full solve against the closed form of the same
//! scheme on the same rows (alpha* and H*, `optimal_acceptance`), the two
//! run alternately row by row, `GRID_REPEATS` times each (one by
//! default, as a decoding loop solves each row once), each row's median
//! time kept: a repeat finds the row in cache and the allocator's pages
//! mapped, which the closed form gains most from (`benches/README.md`).
//! Independent drafts, which have no closed form, against the i.i.d.
//! solve of the same rows.
//!
//! One solve per row and cell is the measurement. Uses the 64 rows of
//! `../shared/data` when present, else the repository's 8. Narrow it with
//! `GRID_SCHEMES=iid GRID_K=100 GRID_N=4 GRID_ROWS=8 GRID_BUDGETS_MS=0,1,none
//! GRID_DRAWS=20000 GRID_REPEATS=5`.
//!
//! `cargo bench -p mdsd-benches --bench budget_grid`

use std::time::{Duration, Instant};

use mdsd_benches::grid_problem;
use mdsd_bounds::optimal_acceptance;
use mdsd_convex::ConvexSolver;
use mdsd_core::{Problem, SchemeKind, Solve, Status};
use mdsd_verify::{OptimalConvex, Z_99};

fn list(name: &str, default: &str) -> Vec<String> {
    (std::env::var(name).unwrap_or_else(|_| default.into()))
        .split(',')
        .map(|x| x.trim().to_string())
        .collect()
}

fn parsed<T: std::str::FromStr>(name: &str, default: &str) -> Vec<T> {
    (list(name, default).iter())
        .map(|x| x.parse().unwrap_or_else(|_| panic!("{name}: {x}")))
        .collect()
}

/// A budget's name ("none" or milliseconds) as a time limit.
fn time_limit(name: &str) -> Option<Duration> {
    (name != "none").then(|| Duration::from_secs_f64(name.parse::<f64>().expect(name) / 1e3))
}

fn ms(time: Duration, count: usize) -> f64 {
    time.as_secs_f64() * 1e3 / count as f64
}

/// The median of `times` (the upper one of an even count).
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let mut rows = mdsd_benches::shared_rows().unwrap_or_else(mdsd_benches::real_rows);
    rows.truncate(parsed("GRID_ROWS", &rows.len().to_string())[0]);
    let count = rows.len();
    let schemes: Vec<SchemeKind> = parsed("GRID_SCHEMES", "iid,wor,independent");
    let ks: Vec<usize> = parsed("GRID_K", "100,1000,151936");
    let ns: Vec<usize> = parsed("GRID_N", "4");
    let budgets = list("GRID_BUDGETS_MS", "0,0.5,1,2,5,none");
    println!("{count} real rows, V = {}", rows[0].0.len());
    println!(
        "\n| scheme | k | n | budget ms | ms per solve | mean acceptance | sampled \
         | mean gap | max gap | converged |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let draws: u64 = parsed("GRID_DRAWS", "20000")[0];
    // One solver per budget for every solve: it keeps its memory.
    let solvers: Vec<ConvexSolver> = (budgets.iter())
        .map(|b| ConvexSolver::default().with_time_limit(time_limit(b)))
        .collect();
    for &scheme in &schemes {
        for &k in &ks {
            for &n in &ns {
                let problems: Vec<Problem> = (rows.iter())
                    .map(|(p, q)| grid_problem(p, q, scheme, k, n))
                    .collect();
                let alpha_star: Vec<Option<f64>> = (problems.iter())
                    .map(|problem| match scheme {
                        SchemeKind::Independent => None,
                        _ => Some(optimal_acceptance(problem).unwrap().alpha_star),
                    })
                    .collect();
                for (budget, solver) in budgets.iter().zip(&solvers) {
                    let (mut time, mut gaps, mut converged) = (Duration::ZERO, Vec::new(), 0);
                    let (mut accepted, mut sampled) = (0.0, Vec::new());
                    for (problem, alpha_star) in problems.iter().zip(&alpha_star) {
                        let start = Instant::now();
                        let solution = solver.solve(problem);
                        time += start.elapsed();
                        let Ok(solution) = solution else { continue };
                        let summary = solution.summary.clone();
                        let verifier = OptimalConvex::from_solution(problem.clone(), solution);
                        let seed = sampled.len() as u64;
                        let report = mdsd_verify::sampled(problem, &verifier, draws, seed).unwrap();
                        sampled.push(report.acceptance);
                        let reference = alpha_star.unwrap_or(summary.alpha_star);
                        gaps.push((reference - summary.acceptance).max(0.0));
                        accepted += summary.acceptance;
                        converged += usize::from(summary.status != Status::TimeLimit);
                    }
                    let solved = gaps.len().max(1) as f64;
                    let mean = gaps.iter().sum::<f64>() / solved;
                    // The rows' sampled acceptances: their mean and its 99%
                    // half-width (each row's binomial variance, averaged).
                    let sampled_mean = sampled.iter().sum::<f64>() / solved;
                    let variance: f64 = sampled.iter().map(|a| a * (1.0 - a)).sum::<f64>()
                        / (draws as f64 * solved * solved);
                    let half_width = Z_99 * variance.sqrt();
                    let worst = gaps.iter().fold(0.0f64, |a, &b| a.max(b));
                    println!(
                        "| {scheme} | {k} | {n} | {budget} | {:.2} | {:.4} \
                         | {sampled_mean:.4} ± {half_width:.4} | {mean:.1e} | {worst:.1e} \
                         | {converged}/{count} |",
                        ms(time, count),
                        accepted / solved
                    );
                }
            }
        }
    }

    let repeats = parsed::<usize>("GRID_REPEATS", "1")[0];
    assert!(repeats >= 1, "GRID_REPEATS: {repeats}: at least 1");
    println!("\nThe full solve against the closed form, alternately row by row:\n");
    if repeats > 1 {
        println!("(each row's median of {repeats} alternations)\n");
    }
    println!("| scheme | k | n | baseline | baseline ms | full solve ms | ratio |");
    println!("|---|---|---|---|---|---|---|");
    let solver = ConvexSolver::default();
    for &scheme in &schemes {
        for &k in &ks {
            for &n in &ns {
                let (mut baseline, mut full) = (Duration::ZERO, Duration::ZERO);
                for (p, q) in &rows {
                    let problem = grid_problem(p, q, scheme, k, n);
                    // Independent drafts' baseline, the i.i.d. solve of the row.
                    let iid = (scheme == SchemeKind::Independent)
                        .then(|| grid_problem(p, q, SchemeKind::Iid, k, n));
                    let (mut baselines, mut fulls) = (Vec::new(), Vec::new());
                    for _ in 0..repeats {
                        let start = Instant::now();
                        match &iid {
                            Some(iid) => {
                                std::hint::black_box(solver.solve(iid).unwrap());
                            }
                            None => {
                                std::hint::black_box(optimal_acceptance(&problem).unwrap());
                            }
                        }
                        baselines.push(start.elapsed());
                        let start = Instant::now();
                        std::hint::black_box(solver.solve(&problem).ok());
                        fulls.push(start.elapsed());
                    }
                    baseline += median(baselines);
                    full += median(fulls);
                }
                let name = match scheme {
                    SchemeKind::Independent => "iid solve",
                    _ => "closed form",
                };
                println!(
                    "| {scheme} | {k} | {n} | {name} | {:.2} | {:.2} | {:.1}x |",
                    ms(baseline, count),
                    ms(full, count),
                    full.as_secs_f64() / baseline.as_secs_f64()
                );
            }
        }
    }
}
