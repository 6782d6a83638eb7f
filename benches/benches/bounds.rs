//! iid alpha* at V = 151936 on real rows: full sort against bucket selection
//! (goal: selection <= 0.5 ms per row on one core), and the
//! without-replacement quadrature (goal: under 50 ms per row for n <= 8).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mdsd_bounds::{IidAlgorithm, optimal_acceptance_iid, optimal_acceptance_wor};
use mdsd_core::DraftScheme;

fn iid_sort_vs_selection(c: &mut Criterion) {
    let rows = mdsd_benches::real_rows();
    let mut group = c.benchmark_group("iid_bound_V151936_per_row");
    for n in [2, 8] {
        for (name, algorithm) in [
            ("sort", IidAlgorithm::Sort),
            ("selection", IidAlgorithm::Selection),
        ] {
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
                let mut i = 0;
                b.iter(|| {
                    let (p, q) = &rows[i % rows.len()];
                    i += 1;
                    optimal_acceptance_iid(p, q, n, algorithm)
                        .unwrap()
                        .alpha_star
                });
            });
        }
    }
    group.finish();
}

fn wor_quadrature(c: &mut Criterion) {
    let rows = mdsd_benches::real_rows();
    let mut group = c.benchmark_group("wor_bound_V151936_per_row");
    group.sample_size(10);
    for n in [2, 4, 8] {
        group.bench_with_input(BenchmarkId::new("quadrature", n), &n, |b, &n| {
            let mut i = 0;
            b.iter(|| {
                let (p, q) = &rows[i % rows.len()];
                i += 1;
                let drafts = DraftScheme::without_replacement(q.clone(), n).unwrap();
                optimal_acceptance_wor(p, &drafts).unwrap().alpha_star
            });
        });
    }
    group.finish();
}

criterion_group!(benches, iid_sort_vs_selection, wor_quadrature);
criterion_main!(benches);
