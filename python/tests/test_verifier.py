"""mdsd.Verifier: every built-in verifier of i.i.d. drafts is lossless by
exact enumeration of its conditional law, its acceptance is what the
enumeration gives, and sample_batch draws from p."""

import itertools

import numpy as np
import pytest

import mdsd

IID_VERIFIERS = ["nss", "naive", "specinfer", "kseq", "khisti", "optimal-flow", "optimal-convex"]


def instance(seed, v=5):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(v)), rng.dirichlet(np.full(v, 0.5))


@pytest.mark.parametrize("name", IID_VERIFIERS)
@pytest.mark.parametrize("n", [2, 3])
def test_conditional_laws_reproduce_p(name, n):
    p, q = instance(n)
    p, q = p / p.sum(), q / q.sum()
    verifier = mdsd.Verifier(name, p, q, n)
    assert verifier.name == name
    output = np.zeros_like(p)
    accepted = 0.0
    for drafts in itertools.product(range(len(p)), repeat=n):
        weight = np.prod(q[list(drafts)])
        law = verifier.conditional(list(drafts))
        assert abs(law.sum() - 1) < 1e-9 and law.min() >= -1e-12
        output += weight * law
        accepted += weight * law[sorted(set(drafts))].sum()
    assert np.abs(output - p).max() < 1e-9, name
    assert abs(verifier.acceptance - accepted) < 1e-9, name
    alpha = mdsd.alpha_star(p, q, n)
    assert verifier.acceptance <= alpha + 1e-9


def test_sample_batch_draws_from_p():
    p, q = instance(7)
    verifier = mdsd.Verifier("specinfer", p, q, 2)
    rng = np.random.default_rng(1)
    draws = 40_000
    drafts = rng.choice(len(q), size=(draws, 2), p=q / q.sum())
    tokens = verifier.sample_batch(drafts, seed=5)
    assert tokens.shape == (draws,)
    assert np.array_equal(tokens, verifier.sample_batch(drafts, seed=5)), "a seed repeats"
    counts = np.bincount(tokens, minlength=len(p))
    expected = draws * p / p.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # The chi-square quantile of 4 degrees of freedom at 1 - 1e-4.
    assert chi2 < 23.51, chi2
    assert verifier.sample([0, 1], seed=3) == verifier.sample([0, 1], seed=3)


def test_verifier_errors():
    p, q = instance(2)
    with pytest.raises(ValueError, match="unknown verifier"):
        mdsd.Verifier("nope", p, q, 2)
    with pytest.raises(ValueError, match="one row"):
        mdsd.Verifier("specinfer", np.tile(p, (2, 1)), np.tile(q, (2, 1)), 2)
    verifier = mdsd.Verifier("specinfer", p, q, 2)
    with pytest.raises(ValueError, match="negative"):
        verifier.sample_batch(np.array([[0, -1]]))
    with pytest.raises(ValueError):
        verifier.conditional([0, 99])


@pytest.mark.parametrize("method", ["lp", "flow", "convex"])
def test_solve_agrees_with_the_closed_form(method):
    p, q = instance(9)
    for n in (2, 3):
        solution = mdsd.solve(p, q, n, method=method)
        alpha = mdsd.alpha_star(p, q, n)
        assert abs(solution.alpha_star - alpha) < 1e-9
        assert alpha - 1e-7 <= solution.acceptance <= alpha + 1e-9
        pr, qr = p / p.sum(), q / q.sum()
        h = solution.certificate
        assert abs(pr[h].sum() + 1 - qr[h].sum() ** n - alpha) < 1e-9
        if method in ("lp", "flow"):
            plan = solution.plan
            # The plan's output marginal is p, and it accepts alpha*.
            output = plan["probs"] @ plan["conditional"]
            assert np.abs(output - pr).max() < 1e-9
        else:
            assert solution.plan is None
    with pytest.raises(ValueError, match="method"):
        mdsd.solve(p, q, 2, method="simplex")


@pytest.mark.parametrize("truncation", [1, 2, 5])
def test_khisti_truncation_is_lossless_and_weakly_better(truncation):
    rng = np.random.default_rng(truncation)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    report = mdsd.check_verifier(
        lambda p, q, d: mdsd.Verifier("khisti", p, q, 2, truncation=truncation).conditional(d),
        p, q, n=2)
    assert report.lossless, report
    narrower = mdsd.Verifier("khisti", p, q, 2, truncation=1).acceptance
    assert mdsd.Verifier("khisti", p, q, 2, truncation=truncation).acceptance >= narrower - 1e-12


def test_preparation_settings():
    p, q = [0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]
    alpha = mdsd.alpha_star(p, q, 2)
    for tol in (1e-3, 1e-9):
        assert abs(mdsd.Verifier("optimal-convex", p, q, 2, max_gap=tol).acceptance - alpha) < 10 * tol
    with pytest.raises(ValueError, match="truncation s = 16"):
        mdsd.Verifier("khisti", p, q, 2, truncation=16)
    with pytest.raises(ValueError, match="max_gap = -1"):
        mdsd.Verifier("optimal-convex", p, q, 2, max_gap=-1)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="budget_ms"):
            mdsd.Verifier("optimal-convex", p, q, 2, budget_ms=bad)
    with pytest.raises(ValueError, match="budget of 3"):
        mdsd.Verifier("optimal-flow", p, q, 2, max_sets=3)
    with pytest.raises(ValueError, match="no setting 'max_gap'"):
        mdsd.Verifier("specinfer", p, q, 2, max_gap=1e-3)
