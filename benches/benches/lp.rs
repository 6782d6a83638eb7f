//! The exact LP (microlp) at small (V, n), both formulations, with the
//! closed-form bound on the same instances as the baseline.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mdsd_benches::iid_instance;
use mdsd_bounds::optimal_acceptance;
use mdsd_lp::{Formulation, LpSolver};

fn lp(c: &mut Criterion) {
    let mut group = c.benchmark_group("lp_iid");
    group.sample_size(10);
    for (v, n) in [(4, 2), (6, 3), (8, 3), (8, 4)] {
        let problem = iid_instance(v, n);
        let id = format!("V{v}_n{n}");
        group.bench_with_input(BenchmarkId::new("bound", &id), &problem, |b, problem| {
            b.iter(|| optimal_acceptance(problem).unwrap().alpha)
        });
        for formulation in [Formulation::Full, Formulation::Relaxed] {
            let solver = LpSolver::default().with_formulation(formulation);
            group.bench_with_input(
                BenchmarkId::new(format!("lp_{formulation}"), &id),
                &problem,
                |b, problem| b.iter(|| solver.solve(problem).unwrap().alpha),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, lp);
criterion_main!(benches);
