//! Blocks on live models: a Markov model answered through the batched
//! `LiveModel` interface gives what the context model gives directly, in
//! exact mode to rounding and in sampled mode within the 99% interval,
//! and a tree costs at most L + 1 calls of each model.

use std::sync::Arc;

use mdsd_core::{ContextModel, Distribution, DraftShape, MarkovModel, SchemeKind, Side};
use mdsd_verify::VerifyError;
use mdsd_verify::block::{
    CachedModel, LiveModel, LiveSettings, exact_block, exact_live_blocks, exact_tree,
    prepare_block, prepare_tree_block, sampled_live_blocks,
};

const METHODS: [&str; 5] = ["token", "bv", "gbv", "specinfer", "optimal-convex"];

/// A context model behind the batched interface, as a model pair behind
/// callbacks would be: laws by whole prefix, counted per call.
struct Batched {
    model: MarkovModel,
    calls: [u64; 2],
    largest_batch: usize,
}

impl Batched {
    fn new(model: MarkovModel) -> Self {
        Self {
            model,
            calls: [0; 2],
            largest_batch: 0,
        }
    }
}

impl LiveModel for Batched {
    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn laws(
        &mut self,
        side: Side,
        prefixes: &[Vec<usize>],
    ) -> Result<Vec<Arc<Distribution>>, VerifyError> {
        self.calls[usize::from(side == Side::Draft)] += 1;
        self.largest_batch = self.largest_batch.max(prefixes.len());
        Ok(prefixes
            .iter()
            .map(|prefix| {
                let context = self.model.context(prefix);
                Arc::new(match side {
                    Side::Target => self.model.target(context).clone(),
                    Side::Draft => self.model.draft(context).clone(),
                })
            })
            .collect())
    }
}

#[test]
fn exact_mode_through_batches_is_the_context_model_exactly() {
    let markov = MarkovModel::random(3, 1, 7).unwrap();
    let mut live = Batched::new(markov.clone());
    let (depth, paths) = (2, 2);
    let shape = DraftShape::Paths(paths);
    let reports = exact_live_blocks(&mut live, &[], &METHODS, (depth, &shape), 1 << 20).unwrap();
    // One call per depth 0..=L and model.
    assert_eq!(live.calls, [depth as u64 + 1; 2]);
    for report in reports {
        let verifier = prepare_block(&report.name, &markov, depth).unwrap();
        let direct = exact_block(&markov, verifier.as_ref(), depth, paths, 1 << 20).unwrap();
        assert!(
            (report.expected_accepted - direct.expected_accepted).abs() < 1e-12,
            "{}: {} against {}",
            report.name,
            report.expected_accepted,
            direct.expected_accepted
        );
        assert!(report.max_law_error.unwrap() < 1e-12, "{report:?}");
    }
}

#[test]
fn sampled_mode_agrees_with_exact_enumeration_and_counts_its_calls() {
    let markov = MarkovModel::random(4, 1, 11).unwrap();
    let (depth, paths) = (3, 2);
    let exact = exact_live_blocks(
        &mut Batched::new(markov.clone()),
        &[],
        &METHODS,
        (depth, &DraftShape::Paths(paths)),
        1 << 22,
    )
    .unwrap();
    let mut live = Batched::new(markov);
    let settings = LiveSettings {
        depth,
        shape: DraftShape::Paths(paths),
        samples: 20_000,
        seed: 3,
        batch: 256,
    };
    let sampled = sampled_live_blocks(&mut live, &[vec![]], &METHODS, settings, &|_| {}).unwrap();
    assert_eq!(sampled.blocks, 20_000);
    // A round of 256 blocks: L + 1 draft calls and one target call.
    assert_eq!(sampled.rounds, 20_000u64.div_ceil(256));
    assert_eq!(sampled.draft_calls, sampled.rounds * (depth as u64 + 1));
    assert_eq!(sampled.target_calls, sampled.rounds);
    assert_eq!(live.calls, [sampled.target_calls, sampled.draft_calls]);
    for (exact, sampled) in exact.iter().zip(&sampled.methods) {
        let half_width = mdsd_verify::Z_99 * sampled.standard_error.unwrap();
        assert!(
            (sampled.expected_accepted - exact.expected_accepted).abs() <= half_width,
            "{}: sampled {} +- {half_width}, exact {}",
            exact.name,
            sampled.expected_accepted,
            exact.expected_accepted
        );
        assert!(
            sampled.first_token_p_value.unwrap() >= 0.01,
            "{}: first token p-value {:?}",
            sampled.name,
            sampled.first_token_p_value
        );
        let total: f64 = sampled.tau_law.iter().sum();
        assert!((total - 1.0).abs() < 1e-12);
    }
    // The common random numbers: token-by-token verification never
    // accepts more than block verification of the same first path, on
    // average.
    assert!(sampled.methods[0].expected_accepted <= sampled.methods[1].expected_accepted + 1e-12);
}

#[test]
fn a_cache_answers_repeated_prefixes_and_forgets_the_oldest() {
    let markov = MarkovModel::random(3, 1, 2).unwrap();
    let mut cached = CachedModel::new(Batched::new(markov.clone()), 4);
    let prefixes = vec![vec![], vec![0], vec![1], vec![0]];
    let first = cached.laws(Side::Target, &prefixes).unwrap();
    assert_eq!(first.len(), 4);
    assert_eq!(first[1], first[3]);
    assert_eq!(cached.model().calls, [1, 0]);
    // All seen: no call.
    cached.laws(Side::Target, &prefixes[..3]).unwrap();
    assert_eq!(cached.calls(Side::Target), 1);
    // Two new ones push the two oldest out of a cache of four.
    cached.laws(Side::Target, &[vec![2], vec![0, 1]]).unwrap();
    cached.laws(Side::Target, &[vec![]]).unwrap();
    assert_eq!(cached.calls(Side::Target), 3);
    let direct = markov.target(markov.context(&[0, 1]));
    let again = cached.laws(Side::Target, &[vec![0, 1]]).unwrap();
    assert_eq!(again[0].as_ref(), direct);
}

/// A model whose answer has the wrong shape is named, not trusted.
#[test]
fn a_model_that_answers_wrongly_is_an_error() {
    struct Short;
    impl LiveModel for Short {
        fn vocab_size(&self) -> usize {
            3
        }
        fn laws(
            &mut self,
            _: Side,
            _: &[Vec<usize>],
        ) -> Result<Vec<Arc<Distribution>>, VerifyError> {
            Ok(vec![Arc::new(
                Distribution::from_probs(vec![0.5, 0.5, 0.0]).unwrap(),
            )])
        }
    }
    let settings = LiveSettings {
        depth: 2,
        shape: DraftShape::Paths(2),
        samples: 10,
        seed: 0,
        batch: 4,
    };
    let err = sampled_live_blocks(
        &mut Short,
        &[vec![0]],
        &["token"],
        settings.clone(),
        &|_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("the draft model: 1 laws for 2 prefixes"),
        "{err}"
    );
    let err = sampled_live_blocks(&mut Short, &[vec![5]], &["token"], settings, &|_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("5"), "{err}");
}

/// Static trees on a live model: exact mode equals the context model's
/// enumeration, and sampled mode (trees drawn round by round, a node's
/// children by its scheme) agrees with it within the 99% interval.
#[test]
fn trees_on_a_live_model() {
    let markov = MarkovModel::random(3, 1, 5).unwrap();
    let depth = 2;
    // (optimal-convex on wor trees is checked in tests/trees.rs: preparing
    // it at every node of every fresh live tree is slow.)
    for (children, methods) in [
        (
            SchemeKind::WithoutReplacement,
            ["bv", "traversal", "rrs-wor"],
        ),
        (SchemeKind::Iid, ["bv", "specinfer", "optimal-convex"]),
    ] {
        let shape = DraftShape::tree(vec![2, 2], children).unwrap();
        let exact = exact_live_blocks(
            &mut Batched::new(markov.clone()),
            &[],
            &methods,
            (depth, &shape),
            1 << 20,
        )
        .unwrap();
        let settings = LiveSettings {
            depth,
            shape: shape.clone(),
            samples: 20_000,
            seed: 4,
            batch: 500,
        };
        let mut live = Batched::new(markov.clone());
        let sampled =
            sampled_live_blocks(&mut live, &[vec![]], &methods, settings, &|_| {}).unwrap();
        assert_eq!(sampled.draft_calls, sampled.rounds * (depth as u64 + 1));
        for ((exact, sampled), name) in exact.iter().zip(&sampled.methods).zip(methods) {
            let verifier = prepare_tree_block(name, &markov, depth, &shape).unwrap();
            let direct = exact_tree(&markov, verifier.as_ref(), depth, &shape, 1 << 20).unwrap();
            assert!(
                (exact.expected_accepted - direct.expected_accepted).abs() < 1e-12,
                "{name}"
            );
            assert!(exact.max_law_error.unwrap() < 1e-12, "{name}");
            let half_width = mdsd_verify::Z_99 * sampled.standard_error.unwrap();
            assert!(
                (sampled.expected_accepted - exact.expected_accepted).abs() <= half_width,
                "{name} on {}: sampled {} +- {half_width}, exact {}",
                shape.describe(),
                sampled.expected_accepted,
                exact.expected_accepted
            );
        }
    }
}
