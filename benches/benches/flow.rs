//! Max flow against the LP at small (V, n), and max flow alone at the sizes
//! the LP cannot reach (goal: V = 50, n = 3, about 21k sets, under 100 ms).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mdsd_benches::iid_instance;
use mdsd_flow::FlowSolver;
use mdsd_lp::{Formulation, LpSolver};

fn flow_vs_lp(c: &mut Criterion) {
    let mut group = c.benchmark_group("flow_vs_lp_iid");
    group.sample_size(10);
    for (v, n) in [(4, 2), (6, 3), (8, 3), (8, 4)] {
        let problem = iid_instance(v, n);
        let id = format!("V{v}_n{n}");
        group.bench_with_input(BenchmarkId::new("flow", &id), &problem, |b, problem| {
            b.iter(|| FlowSolver::default().solve(problem).unwrap().alpha)
        });
        group.bench_with_input(
            BenchmarkId::new("flow_decomposed", &id),
            &problem,
            |b, problem| {
                b.iter(|| {
                    FlowSolver::default()
                        .with_decomposition(true)
                        .solve(problem)
                        .unwrap()
                        .alpha
                })
            },
        );
        let relaxed = LpSolver::default().with_formulation(Formulation::Relaxed);
        group.bench_with_input(
            BenchmarkId::new("lp_relaxed", &id),
            &problem,
            |b, problem| b.iter(|| relaxed.solve(problem).unwrap().alpha),
        );
        if v * n <= 24 {
            group.bench_with_input(BenchmarkId::new("lp_full", &id), &problem, |b, problem| {
                b.iter(|| LpSolver::default().solve(problem).unwrap().alpha)
            });
        }
    }
    group.finish();
}

fn flow_at_scale(c: &mut Criterion) {
    let mut group = c.benchmark_group("flow_iid");
    group.sample_size(10);
    for (v, n) in [(20, 3), (30, 3), (50, 3), (20, 4)] {
        let problem = iid_instance(v, n);
        let id = format!("V{v}_n{n}");
        group.bench_with_input(BenchmarkId::new("flow", &id), &problem, |b, problem| {
            b.iter(|| FlowSolver::default().solve(problem).unwrap().alpha)
        });
        group.bench_with_input(
            BenchmarkId::new("flow_decomposed", &id),
            &problem,
            |b, problem| {
                b.iter(|| {
                    FlowSolver::default()
                        .with_decomposition(true)
                        .solve(problem)
                        .unwrap()
                        .alpha
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("set_law_only", &id),
            &problem,
            |b, problem| b.iter(|| problem.drafts().set_law(usize::MAX).unwrap().len()),
        );
    }
    group.finish();
}

criterion_group!(benches, flow_vs_lp, flow_at_scale);
criterion_main!(benches);
