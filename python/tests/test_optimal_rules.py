"""The optimal verifier under a time budget and in batches: a budgeted rule
is lossless by exact enumeration (a budget of zero included: the start
rule), its reported gap holds against alpha*, a batch gives the rows'
single results, and bad arguments are named."""

import itertools

import numpy as np
import pytest

import mdsd

# Zero (the start rule), one that stops some solves part way, and none.
BUDGETS_MS = [0.0, 0.002, None]


def instance(seed, v):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(v, 0.7)), rng.dirichlet(np.full(v, 0.5))


def tuples(q, n, scheme):
    """Every draft tuple and its probability under the scheme."""
    v = len(q)
    for drafts in itertools.product(range(v), repeat=n):
        if scheme == "iid":
            yield drafts, float(np.prod(q[list(drafts)]))
        elif len(set(drafts)) == n:
            weight, left = 1.0, 1.0
            for d in drafts:
                weight *= q[d] / left
                left -= q[d]
            yield drafts, weight


@pytest.mark.parametrize("scheme", ["iid", "wor"])
@pytest.mark.parametrize("budget_ms", BUDGETS_MS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_budgeted_rules_are_lossless(scheme, budget_ms, seed):
    n, v = 2 + seed % 2, 5
    p, q = instance(seed, v)
    verifier = mdsd.Verifier("optimal-convex", p, q, n, scheme, budget_ms=budget_ms)
    output, accepted = np.zeros(v), 0.0
    for drafts, weight in tuples(q, n, scheme):
        law = verifier.conditional(list(drafts))
        output += weight * law
        accepted += weight * law[sorted(set(drafts))].sum()
    assert np.abs(output - p).max() < 1e-12, (scheme, budget_ms)
    alpha = mdsd.alpha_star(p, q, n, scheme)
    # A rule stopped by its budget (always at 0 ms) reports its enumerated
    # acceptance; a converged one the solver's figure, within the default
    # max_gap of the enumerated one.
    tolerance = 1e-12 if budget_ms == 0 else 1e-7
    assert abs(verifier.acceptance - accepted) < tolerance
    assert accepted <= alpha + 1e-12


@pytest.mark.parametrize("scheme", ["iid", "wor"])
def test_solve_reports_a_certified_gap(scheme):
    p, q = instance(7, 40)
    alpha = mdsd.alpha_star(p, q, 3, scheme)
    for budget_ms in BUDGETS_MS:
        s = mdsd.solve(p, q, 3, method="convex", scheme=scheme, budget_ms=budget_ms)
        assert s.status in ("converged", "time-limit")
        assert s.gap == pytest.approx(s.alpha_star - s.acceptance, abs=1e-15)
        assert s.acceptance + s.gap >= alpha - 1e-12
        assert s.acceptance <= alpha + 1e-12
        if s.status == "converged":
            assert s.gap <= 1e-7
        if budget_ms == 0.0:
            assert s.iterations == 0
    loose = mdsd.solve(p, q, 3, method="convex", scheme=scheme, max_gap=1e-2)
    assert loose.status == "converged" and loose.gap <= 1e-2


@pytest.mark.parametrize("scheme", ["iid", "wor"])
def test_batches_give_the_rows_single_results(scheme):
    rows, v, n = 6, 30, 3
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.full(v, 0.6), rows), rng.dirichlet(np.full(v, 0.6), rows)
    rules = mdsd.optimal_rules(p, q, n, scheme)
    assert len(rules) == rows and rules.status == ["converged"] * rows
    drafts = np.argsort(-q, axis=1)[:, :n]
    tokens = rules.sample(drafts, seed=5)
    for b in range(rows):
        single = mdsd.Verifier("optimal-convex", p[b], q[b], n, scheme)
        assert rules.acceptance[b] == single.acceptance
        assert rules.alpha_star[b] == pytest.approx(mdsd.alpha_star(p[b], q[b], n, scheme),
                                                    abs=1e-12)
        # Row b draws from stream b of the seed, as sample_batch's row b.
        assert tokens[b] == single.sample_batch(drafts, seed=5)[b]
    np.testing.assert_allclose(rules.gap, rules.alpha_star - rules.acceptance, atol=1e-15)
    # A broadcast view of drafts is read as the array it stands for.
    repeated = np.broadcast_to(drafts[:1], drafts.shape)
    np.testing.assert_array_equal(rules.sample(repeated, seed=5),
                                  rules.sample(np.array(repeated), seed=5))
    # The same rows as float32 logits give the same batch as their laws.
    logits = mdsd.optimal_rules(np.log(p).astype(np.float32), np.log(q).astype(np.float32), n,
                                scheme, logits=True)
    assert len(logits) == rows


def test_a_zero_budget_in_a_decoding_loop_keeps_the_target_law():
    vocab = 5
    rng = np.random.default_rng(0)
    target, draft = rng.normal(size=(vocab + 1, vocab)), rng.normal(size=(vocab + 1, vocab))

    def laws(table):
        return lambda prefixes: np.stack([table[p[-1] if p else -1] for p in prefixes])

    model = mdsd.CallbackModel(laws(target), laws(draft), vocab)
    runs = [mdsd.speculative_decode(model, [2], 1, n=2, verifier="optimal-convex", seed=s,
                                    budget_ms=0) for s in range(2000)]
    first = np.array([run["tokens"][0] for run in runs])
    e = np.exp(target[2] - target[2].max())
    fit = mdsd._mdsd.goodness_of_fit(np.bincount(first, minlength=vocab), e / e.sum(), 0.01)
    assert fit["p_value"] >= 0.01, fit
    assert set(runs[0]["step_ms"]) == {"draft", "target", "verifier", "bonus"}
    assert all(ms >= 0 for ms in runs[0]["step_ms"].values())


def test_bad_arguments_are_named():
    p, q = instance(0, 5)
    with pytest.raises(mdsd.MdsdError, match=r"\[B, V\]"):
        mdsd.optimal_rules(p, q, 2)
    rules = mdsd.optimal_rules(p[None], q[None], 2)
    with pytest.raises(mdsd.MdsdError, match="expected n = 2"):
        rules.sample([[0, 1, 2]])
    with pytest.raises(mdsd.MdsdError, match="drafts has 2 rows for a batch of 1"):
        rules.sample([[0, 1], [1, 2]])
    with pytest.raises(mdsd.MdsdError, match="negative"):
        rules.sample([[0, -1]])
    with pytest.raises(mdsd.MdsdError, match="out of range"):
        rules.sample([[0, 9]])
    with pytest.raises(TypeError, match="budget_ms"):
        mdsd.optimal_rules(p[None], q[None], 2, budget_ms="1")
    with pytest.raises(mdsd.MdsdError, match="budget_ms"):
        mdsd.optimal_rules(p[None], q[None], 2, budget_ms=-1)
    with pytest.raises(mdsd.MdsdError, match="max_gap"):
        mdsd.solve(p, q, 2, method="convex", max_gap=2)
    with pytest.raises(mdsd.MdsdError, match="budget_ms"):
        mdsd.solve(p, q, 2, method="convex", budget_ms=float("nan"))
    with pytest.raises(TypeError, match="unexpected keyword argument 'tol'"):
        mdsd.optimal_rules(p[None], q[None], 2, tol=1e-3)
