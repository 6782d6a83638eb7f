//! mdsd-logits' backends over 64 real rows at V = 151936 (`../shared/data`
//! when present, else the repository's 8 rows repeated): alpha* for 8
//! values of n (throughput = rows per second), CPU backend and GPU backend
//! (when wgpu finds an f64 adapter; on lavapipe that is a CPU too, so its
//! figure is no GPU's) against one n at a time through
//! `optimal_acceptance_iid` in the same run; and the softmax of logits
//! (log p) on both. `cargo bench -p mdsd-benches --bench logits`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mdsd_bounds::{IidAlgorithm, optimal_acceptance_iid};
use mdsd_core::{Distribution, Transform};
use mdsd_logits::{Backend, CpuBackend, Matrix, Values, WgpuBackend};
use rayon::prelude::*;

const ROWS: usize = 64;
const NS: [usize; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

fn rows() -> Vec<(Distribution, Distribution)> {
    let rows = mdsd_benches::shared_rows().unwrap_or_else(mdsd_benches::real_rows);
    rows.iter().cycle().take(ROWS).cloned().collect()
}

fn matrix(rows: &[&Distribution]) -> Matrix {
    let rows: Vec<Vec<f64>> = rows.iter().map(|d| d.probs().to_vec()).collect();
    Matrix::from_rows(&rows).expect("rows of one vocabulary")
}

/// The backends to compare: the CPU, and the GPU when there is one.
fn backends_here() -> Vec<Box<dyn Backend>> {
    let mut backends: Vec<Box<dyn Backend>> = vec![Box::new(CpuBackend)];
    match WgpuBackend::new() {
        Ok(gpu) => {
            eprintln!("GPU backend on {}", gpu.adapter());
            backends.push(Box::new(gpu));
        }
        Err(e) => eprintln!("GPU backend not measured: {e}"),
    }
    backends
}

fn backends(c: &mut Criterion) {
    let backends = backends_here();
    let pairs = rows();
    let target = matrix(&pairs.iter().map(|(p, _)| p).collect::<Vec<_>>());
    let draft = matrix(&pairs.iter().map(|(_, q)| q).collect::<Vec<_>>());
    let mut group = c.benchmark_group("logits/iid alpha* x 8 n");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.sample_size(20);
    for backend in &backends {
        group.bench_function(format!("{} backend", backend.name()), |b| {
            b.iter(|| {
                backend
                    .optimal_acceptance_iid(&target, &draft, &NS)
                    .unwrap()
            })
        });
    }
    group.bench_function("baseline: one n at a time", |b| {
        b.iter(|| {
            pairs
                .par_iter()
                .map(|(p, q)| {
                    NS.iter()
                        .map(|&n| {
                            optimal_acceptance_iid(p, q, n, IidAlgorithm::Auto)
                                .unwrap()
                                .alpha_star
                        })
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        })
    });
    group.finish();

    let logits: Vec<Vec<f64>> = pairs
        .iter()
        .map(|(p, _)| p.probs().iter().map(|x| x.ln()).collect())
        .collect();
    let logits = Matrix::from_rows(&logits).expect("rows of one vocabulary");
    let mut group = c.benchmark_group("logits/softmax");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.sample_size(20);
    for backend in &backends {
        group.bench_function(format!("{} backend", backend.name()), |b| {
            b.iter(|| {
                backend
                    .distributions(&logits, Values::Logits, &Transform::default())
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, backends);
criterion_main!(benches);
