"""mdsd.check_verifier in exact mode: a correct Python SpecInfer and the
built-in verifiers pass; three broken verifiers of the kinds engines ship
are caught."""

import numpy as np
import pytest

import mdsd


def spec_infer(p, q, drafts, *, second_step_on_p=False, renormalise=True, shifted=False):
    """Recursive rejection sampling (SpecInfer) as an output law: draft i
    is accepted with min(1, r(x_i) / q(x_i)); on rejection the residual r
    becomes (r - q)+ renormalised; after the last draft, r itself. The
    flags break it the ways the tests check."""
    law = np.zeros_like(p)
    residual, left = p.copy(), 1.0
    for i in range(len(drafts)):
        # A verifier that reads draft i + 1 for draft i.
        x = drafts[min(i + 1, len(drafts) - 1)] if shifted else drafts[i]
        accept = min(1.0, residual[x] / q[x]) if q[x] > 0 else 0.0
        law[x] += left * accept
        left *= 1.0 - accept
        if left <= 0:
            return law
        # The residual's second step on p instead of the current residual.
        base = p if (second_step_on_p and i >= 1) else residual
        residual = np.maximum(base - q, 0.0)
        total = residual.sum()
        if total <= 0:
            residual = p.copy()
        elif renormalise:
            residual = residual / total
    return law + left * residual


def test_a_correct_python_spec_infer_passes():
    report = mdsd.check_verifier(spec_infer, n=3, instances=100)
    assert report.lossless, report
    assert report.max_marginal_error < 1e-12
    assert 0 <= report.gap


@pytest.mark.parametrize("name", ["specinfer", "kseq", "khisti", "optimal-convex"])
def test_built_in_verifiers_pass(name):
    report = mdsd.check_verifier(
        lambda p, q, drafts: mdsd.Verifier(name, p, q, len(drafts)).conditional(list(drafts)),
        n=2, instances=40)
    assert report.lossless, (name, report)
    if name == "optimal-convex":
        assert report.gap < 1e-6


@pytest.mark.parametrize("name", ["rrs-wor", "optimal-convex"])
def test_without_replacement(name):
    prepared = {}

    def verifier(p, q, drafts):
        # Prepared once per instance, not once per draft tuple.
        key = (p.tobytes(), q.tobytes())
        if key not in prepared:
            prepared[key] = mdsd.Verifier(name, p, q, len(drafts), scheme="wor")
        return prepared[key].conditional(list(drafts))

    report = mdsd.check_verifier(verifier, n=2, scheme="wor", instances=40)
    assert report.lossless, report
    if name == "optimal-convex":
        # The convex solver's tolerance, 1e-7, per instance.
        assert report.gap < 1e-7, report


@pytest.mark.parametrize("broken", [
    {"second_step_on_p": True},
    {"renormalise": False},
    {"shifted": True},
])
def test_broken_verifiers_are_caught(broken):
    report = mdsd.check_verifier(lambda p, q, d: spec_infer(p, q, d, **broken), n=3, instances=100)
    assert not report.lossless, broken
    assert max(report.max_marginal_error, report.max_law_error) > 1e-3, report
    assert "NOT lossless" in repr(report)
    assert report.to_dict()["lossless"] is False


def test_given_rows_and_errors():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    report = mdsd.check_verifier(spec_infer, p, q, n=2)
    assert report.instances == 1 and abs(report.alpha_star - 0.86) < 1e-12
    assert abs(report.acceptance - 0.76) < 1e-12
    with pytest.raises(ValueError, match="shape"):
        mdsd.check_verifier(lambda p, q, d: np.ones(2), p, q, n=2)
    with pytest.raises(ValueError, match="enumerates"):
        mdsd.check_verifier(spec_infer, p, q, n=2, scheme="greedy")


def test_independent_drafts():
    """Drafts from different models: optimal-convex and Khisti are
    lossless; optimal-convex reaches alpha* within the solver's tolerance
    (its solution brackets alpha*, 1e-7 wide)."""
    prepared = {}

    def verifier(name):
        def law(p, q, drafts):
            key = (name, p.tobytes(), *(x.tobytes() for x in q))
            if key not in prepared:
                prepared[key] = mdsd.Verifier(name, p, q, len(drafts), scheme="independent")
            return prepared[key].conditional(list(drafts))
        return law

    for name in ("optimal-convex", "khisti"):
        report = mdsd.check_verifier(verifier(name), n=2, scheme="independent", instances=40)
        assert report.lossless, (name, report)
    assert report.gap >= -1e-12
    convex = mdsd.check_verifier(verifier("optimal-convex"), n=2, scheme="independent",
                                 instances=40)
    assert convex.gap < 1e-7, convex
