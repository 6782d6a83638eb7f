//! A stop ends an evaluation wherever it is asked for: before a window,
//! before a row's problem, inside a sampled verifier's draws. Whatever the
//! question at which the caller first answers "stop", the run ends in a
//! stop error, strict or not; it is never a row recorded as failed in a
//! run that then ends as if complete.

use std::sync::atomic::{AtomicUsize, Ordering};

use mdsd::SchemeKind;
use mdsd::core::Progress;
use mdsd::evaluation::{EvalRequest, evaluate};
use mdsd::input::Input;
use mdsd::logits::CpuBackend;
use mdsd::verify::VerifierKind;

/// A caller that answers "stop" from its `from`-th question on (counting
/// from 0), and counts the questions.
struct StopFrom {
    from: usize,
    asked: AtomicUsize,
}

impl StopFrom {
    fn new(from: usize) -> Self {
        Self {
            from,
            asked: AtomicUsize::new(0),
        }
    }
}

impl Progress for StopFrom {
    fn stop_requested(&self) -> bool {
        self.asked.fetch_add(1, Ordering::Relaxed) >= self.from
    }

    fn may_stop(&self) -> bool {
        true
    }
}

/// Every stage that asks: closed forms by batch (i.i.d., without
/// replacement) and by rows (independent drafts, by the convex solver), an
/// exact verifier (optimal-convex, a convex solve per row and n) and a
/// sampled one (NSS without replacement has no closed form).
fn request(strict: bool) -> EvalRequest {
    let rated = |spec| mdsd::evaluation::verifier_scheme(spec).unwrap();
    EvalRequest {
        ns: vec![2, 3],
        schemes: vec![
            SchemeKind::Iid,
            SchemeKind::WithoutReplacement,
            SchemeKind::Independent,
        ],
        verifiers: vec![rated("optimal-convex@wor"), rated("nss@wor")],
        samples: 3000,
        seed: 1,
        strict,
    }
}

#[test]
fn a_stop_ends_the_evaluation_at_any_check() {
    // The built-in sample: 32 rows at V = 1025, one window.
    let input = Input::default();
    let never = StopFrom::new(usize::MAX);
    let done = evaluate(&input, &request(false), &CpuBackend, &never).unwrap();
    assert!(done.failures.is_empty(), "{:?}", done.failures);
    let questions = never.asked.load(Ordering::Relaxed);
    // A window, a problem per row, n and stage, and each sampled task.
    assert!(questions > 32 * 2 * 2, "only {questions} questions asked");
    let methods: Vec<_> = done.verifiers.iter().map(|v| (v.kind, v.method)).collect();
    assert_eq!(
        methods,
        [
            (VerifierKind::OptimalConvex, "exact"),
            (VerifierKind::Nss, "sampled")
        ]
    );
    for from in [0, 1, 2, questions / 2, questions - 1] {
        for strict in [false, true] {
            match evaluate(&input, &request(strict), &CpuBackend, &StopFrom::new(from)) {
                Err(e) => assert!(e.is_stop(), "stop from question {from}: {e}"),
                Ok(evaluation) => panic!(
                    "stop from question {from} of {questions} (strict: {strict}) ended as \
                     complete with {} failed rows",
                    evaluation.failures.len()
                ),
            }
        }
    }
}
