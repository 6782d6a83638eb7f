//! The enumeration-free convex solver (mdsd-convex) on the 8 real rows of
//! the fixture, the draft truncated to its top k tokens: setup time per
//! token for k in {10, 100, 1000} and n in {2, 4, 8} (goal: at most 1 ms at
//! k = 1000, n = 8), against the closed-form alpha* (the baseline: what the
//! optimum costs when no verifier is built). Before timing, each
//! configuration prints its success rate and largest |alpha - alpha*|.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mdsd_benches::real_rows;
use mdsd_bounds::optimal_acceptance;
use mdsd_convex::ConvexSolver;
use mdsd_core::{DraftScheme, Problem};

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
                    worst = worst.max((solution.alpha_star - solution.alpha).abs());
                }
            }
            println!(
                "k = {k}, n = {n}: success {solved}/{}, max |alpha - alpha*| = {worst:.2e}",
                problems.len()
            );
            let id = format!("k{k}_n{n}");
            let mut next = 0;
            group.bench_with_input(BenchmarkId::new("convex", &id), &problems, |b, problems| {
                b.iter(|| {
                    next = (next + 1) % problems.len();
                    solver.solve(&problems[next]).map(|s| s.alpha).ok()
                })
            });
            group.bench_with_input(
                BenchmarkId::new("closed_form_alpha", &id),
                &problems,
                |b, problems| {
                    b.iter(|| {
                        next = (next + 1) % problems.len();
                        optimal_acceptance(&problems[next]).unwrap().alpha
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, grid);
criterion_main!(benches);
