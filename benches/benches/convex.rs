//! The enumeration-free convex solver (mdsd-convex) on the 8 real rows of
//! the fixture, the draft truncated to its top k tokens: setup time per
//! token for k in {10, 100, 1000} and n in {2, 4, 8} (goal: at most 1 ms at
//! k = 1000, n = 8), against the closed-form alpha* (the baseline: what the
//! optimum costs when no verifier is built) and Global Resolution where it
//! succeeds on every row. Before timing, each configuration prints its
//! success rates and largest |alpha - alpha*|. The full grid (64 rows, the
//! full vocabulary) is `convex_grid.rs`.
//!
//! `convex_schemes` times the solver beyond i.i.d. drafts on the same
//! rows, against the i.i.d. solve of the same row and top k (the
//! baseline): drafts without replacement (the double integral) at k = 10,
//! and two draft laws, the row's draft at temperatures 0.7 and 1.3, at k
//! in {10, 100, 1000}; n = 2.
//!
//! `optimal_convex_prepare` times what a decoding loop pays for the
//! optimal verifier at k = 1000: `VerifierKind::OptimalConvex.prepare`
//! from a built problem (solve and sampling tables), the Rust figure that
//! `python/bench/bench_verifier.py` measures `mdsd.Verifier` against.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mdsd_benches::real_rows;
use mdsd_bounds::optimal_acceptance;
use mdsd_convex::{ConvexSolver, GlobalResolution};
use mdsd_core::{Distribution, DraftScheme, Problem, Solve, Transform};
use mdsd_verify::VerifierKind;

fn grid(c: &mut Criterion) {
    let rows = real_rows();
    let mut group = c.benchmark_group("convex_real_rows");
    group.sample_size(10);
    for k in [10, 100, 1000] {
        for n in [2, 4, 8] {
            let problems: Vec<Problem> = rows
                .iter()
                .map(|(p, q)| {
                    Problem::new(p.clone(), DraftScheme::iid(q.top_k(k).unwrap(), n).unwrap())
                        .unwrap()
                })
                .collect();
            let solver = ConvexSolver::default();
            let (mut solved, mut worst) = (0, 0.0f64);
            for problem in &problems {
                if let Ok(solution) = solver.solve(problem) {
                    solved += 1;
                    worst = worst
                        .max((solution.summary.alpha_star - solution.summary.acceptance).abs());
                }
            }
            let baseline = GlobalResolution::default();
            let baseline_solved = problems
                .iter()
                .filter(|problem| baseline.solve(problem).is_ok())
                .count();
            println!(
                "k = {k}, n = {n}: success {solved}/{}, max |alpha - alpha*| = {worst:.2e}; \
                 Global Resolution success {baseline_solved}/{}",
                problems.len(),
                problems.len()
            );
            let id = format!("k{k}_n{n}");
            let mut next = 0;
            group.bench_with_input(BenchmarkId::new("convex", &id), &problems, |b, problems| {
                b.iter(|| {
                    next = (next + 1) % problems.len();
                    solver
                        .solve(&problems[next])
                        .map(|s| s.summary.acceptance)
                        .ok()
                })
            });
            if baseline_solved == problems.len() {
                group.bench_with_input(
                    BenchmarkId::new("global_resolution", &id),
                    &problems,
                    |b, problems| {
                        b.iter(|| {
                            next = (next + 1) % problems.len();
                            baseline
                                .solve(&problems[next])
                                .map(|s| s.summary.acceptance)
                                .ok()
                        })
                    },
                );
            }
            group.bench_with_input(
                BenchmarkId::new("closed_form_alpha", &id),
                &problems,
                |b, problems| {
                    b.iter(|| {
                        next = (next + 1) % problems.len();
                        optimal_acceptance(&problems[next]).unwrap().alpha_star
                    })
                },
            );
        }
    }
    group.finish();
}

fn prepare(c: &mut Criterion) {
    let rows = real_rows();
    let mut group = c.benchmark_group("optimal_convex_prepare");
    group.sample_size(20);
    for n in [2, 4, 8] {
        let problems: Vec<Problem> = rows
            .iter()
            .map(|(p, q)| {
                Problem::new(
                    p.clone(),
                    DraftScheme::iid(q.top_k(1000).unwrap(), n).unwrap(),
                )
                .unwrap()
            })
            .collect();
        let mut next = 0;
        group.bench_with_input(
            BenchmarkId::new("k1000", format!("n{n}")),
            &problems,
            |b, problems| {
                b.iter(|| {
                    next = (next + 1) % problems.len();
                    VerifierKind::OptimalConvex.prepare(&problems[next]).is_ok()
                })
            },
        );
    }
    group.finish();
}

fn schemes(c: &mut Criterion) {
    let rows = real_rows();
    let mut group = c.benchmark_group("convex_schemes");
    group.sample_size(10);
    let at = |q: &Distribution, temperature: f64, k: usize| {
        let transform = Transform {
            temperature: Some(temperature),
            top_k: Some(k),
            top_p: None,
        };
        transform.apply(q).unwrap()
    };
    for k in [10, 100, 1000] {
        let mut cases: Vec<(&str, Vec<Problem>)> = vec![(
            "iid",
            (rows.iter())
                .map(|(p, q)| {
                    Problem::new(p.clone(), DraftScheme::iid(q.top_k(k).unwrap(), 2).unwrap())
                        .unwrap()
                })
                .collect(),
        )];
        cases.push((
            "independent",
            (rows.iter())
                .map(|(p, q)| {
                    let drafts = DraftScheme::independent(vec![at(q, 0.7, k), at(q, 1.3, k)]);
                    Problem::new(p.clone(), drafts.unwrap()).unwrap()
                })
                .collect(),
        ));
        if k == 10 {
            cases.push((
                "wor",
                (rows.iter())
                    .map(|(p, q)| {
                        let drafts = DraftScheme::without_replacement(q.top_k(k).unwrap(), 2);
                        Problem::new(p.clone(), drafts.unwrap()).unwrap()
                    })
                    .collect(),
            ));
        }
        let solver = ConvexSolver::default();
        for (scheme, problems) in &cases {
            let mut next = 0;
            group.bench_with_input(
                BenchmarkId::new(*scheme, format!("k{k}_n2")),
                problems,
                |b, problems| {
                    b.iter(|| {
                        next = (next + 1) % problems.len();
                        solver
                            .solve(&problems[next])
                            .map(|s| s.summary.acceptance)
                            .ok()
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, grid, prepare, schemes);
criterion_main!(benches);
