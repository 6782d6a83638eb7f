//! The exact solvers on fixed iid instances: at small (V, n) the
//! closed-form bound, both LP formulations and max flow side by side (goal:
//! flow at least 100x faster than the LP at (8, 4)); at sizes the LP cannot
//! reach, max flow alone (goal: V = 50, n = 3, about 21k sets, under 100 ms).

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use mdsd_benches::iid_instance;
use mdsd_bounds::optimal_acceptance;
use mdsd_core::{Problem, Solve};
use mdsd_flow::FlowSolver;
use mdsd_lp::{Formulation, LpSolver};

/// The whole network and the decomposed pair on one instance.
fn bench_flow(group: &mut BenchmarkGroup<WallTime>, id: &str, problem: &Problem) {
    for (name, decomposed) in [("flow", false), ("flow_decomposed", true)] {
        let solver = FlowSolver::default().with_decomposition(decomposed);
        group.bench_with_input(BenchmarkId::new(name, id), problem, |b, problem| {
            b.iter(|| solver.solve(problem).unwrap().summary.alpha_star)
        });
    }
}

fn small(c: &mut Criterion) {
    let mut group = c.benchmark_group("exact_iid");
    group.sample_size(10);
    for (v, n) in [(4, 2), (6, 3), (8, 3), (8, 4)] {
        let problem = iid_instance(v, n);
        let id = format!("V{v}_n{n}");
        group.bench_with_input(BenchmarkId::new("bound", &id), &problem, |b, problem| {
            b.iter(|| optimal_acceptance(problem).unwrap().alpha_star)
        });
        bench_flow(&mut group, &id, &problem);
        for formulation in [Formulation::Full, Formulation::Relaxed] {
            let solver = LpSolver::default().with_formulation(formulation);
            group.bench_with_input(
                BenchmarkId::new(format!("lp_{formulation}"), &id),
                &problem,
                |b, problem| b.iter(|| solver.solve(problem).unwrap().summary.alpha_star),
            );
        }
    }
    group.finish();
}

fn at_scale(c: &mut Criterion) {
    let mut group = c.benchmark_group("flow_iid");
    group.sample_size(10);
    for (v, n) in [(20, 3), (30, 3), (50, 3), (20, 4)] {
        let problem = iid_instance(v, n);
        let id = format!("V{v}_n{n}");
        bench_flow(&mut group, &id, &problem);
        group.bench_with_input(
            BenchmarkId::new("set_law_only", &id),
            &problem,
            |b, problem| b.iter(|| problem.drafts().set_law(usize::MAX).unwrap().len()),
        );
    }
    group.finish();
}

criterion_group!(benches, small, at_scale);
criterion_main!(benches);
