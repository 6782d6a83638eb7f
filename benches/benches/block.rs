//! Block verification at full vocabulary: one block of L = 8 draft tokens
//! on a real row pair (V = 151936) used as context-independent laws, K = 4
//! i.i.d. paths for GBV, against token-by-token speculative sampling and
//! block verification of one path in the same run. Each iteration draws the
//! paths and verifies them (one block); the per-context preparation (GBV's
//! sort by p/q, the samplers' cumulative sums) is done before timing and
//! measured on its own. `cargo bench -p mdsd-benches --bench block`.

use criterion::{Criterion, criterion_group, criterion_main};
use mdsd_core::{ContextIndependent, DraftShape};
use mdsd_verify::block::{TreeSampler, prepare_block};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const DEPTH: usize = 8;
const PATHS: usize = 4;

fn block(c: &mut Criterion) {
    let (p, q) = mdsd_benches::real_rows().swap_remove(0);
    let model = ContextIndependent::new(p, q).expect("one vocabulary");
    let mut group = c.benchmark_group("block/V=151936 L=8");
    group.sample_size(30);
    for (name, paths) in [("token", 1), ("bv", 1), ("gbv", 1), ("gbv", PATHS)] {
        let verifier = prepare_block(name, &model, DEPTH).expect("a block method");
        let shape = DraftShape::Paths(paths);
        let sampler = TreeSampler::new(&model, DEPTH, &shape).expect("depth within the model");
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        // Warm the per-context caches.
        let drafts = sampler.sample(&mut rng).expect("drafts");
        verifier.sample(&drafts, &mut rng).expect("valid paths");
        group.bench_function(format!("{name} K={paths} per block"), |b| {
            b.iter(|| {
                let drafts = sampler.sample(&mut rng).expect("drafts");
                verifier.sample(&drafts, &mut rng).expect("valid paths")
            })
        });
    }
    let sampler = TreeSampler::new(&model, DEPTH, &DraftShape::Paths(PATHS)).expect("the depth");
    let drafts = sampler
        .sample(&mut ChaCha8Rng::seed_from_u64(2))
        .expect("drafts");
    group.bench_function(
        format!("gbv K={PATHS} first block (with the sort by p/q)"),
        |b| {
            b.iter(|| {
                let verifier = prepare_block("gbv", &model, DEPTH).expect("gbv");
                let mut rng = ChaCha8Rng::seed_from_u64(3);
                verifier.sample(&drafts, &mut rng).expect("valid paths")
            })
        },
    );
    group.finish();
}

criterion_group!(benches, block);
criterion_main!(benches);
