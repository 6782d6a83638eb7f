"""Live model pairs through callbacks: block efficiency against `mdsd block
--exact` on its Markov models, the output law of whole blocks by
enumeration, the calls a round costs, clear errors from bad callbacks, and
a speculative decoding loop whose output has the target's law and whose
tokens per target call are the verifier's acceptance plus one."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mdsd

ROOT = Path(__file__).resolve().parents[2]
METHODS = ["token", "bv", "gbv", "specinfer", "optimal-convex"]


def _cli_exact(binary, seed, vocab, order, depth, paths):
    out = subprocess.run(
        [str(binary), "block", "--markov", str(seed), "--markov-vocab", str(vocab),
         "--order", str(order), "--depth", str(depth), "--paths", str(paths),
         "--methods", ",".join(METHODS), "--exact", "--json"],
        check=True, capture_output=True, text=True)
    return {m["name"]: m for m in json.loads(out.stdout)["methods"]}


@pytest.mark.parametrize("seed,vocab,order", [(7, 3, 1), (2, 4, 2)])
def test_markov_models_through_callbacks_match_mdsd_block(mdsd_binary, seed, vocab, order):
    depth, paths = 2, 2
    cli = _cli_exact(mdsd_binary, seed, vocab, order, depth, paths)
    laws = mdsd.MarkovLaws(vocab, order, seed)
    exact = mdsd.block_efficiency(mdsd.CallbackModel(laws.target, laws.draft, vocab,
                                                     logits=False),
                                  [[]], depth, paths, METHODS, samples=None)
    # Every prefix of up to L tokens: L + 1 calls of each function.
    assert (exact.target_calls, exact.draft_calls) == (depth + 1, depth + 1)
    for name in METHODS:
        figures = exact.methods[name]
        assert abs(figures.expected_accepted - cli[name]["expected_accepted"]) < 1e-12, name
        np.testing.assert_allclose(figures.tau_law, cli[name]["tau_law"], atol=1e-12)
        # The output law of whole blocks, enumerated through the callbacks.
        assert figures.max_law_error < 1e-12, name

    # Sampled on a fresh model (no cache): within the 99% interval, the
    # first token as the target's law, and at most L + 1 draft calls and
    # one target call a round.
    model = mdsd.CallbackModel(laws.target, laws.draft, vocab, logits=False, cache_size=0)
    sampled = mdsd.block_efficiency(model, [[]], depth, paths, METHODS, samples=20_000,
                                    seed=1, batch=500)
    assert sampled.rounds == 40
    assert sampled.target_calls <= sampled.rounds
    assert sampled.draft_calls <= sampled.rounds * (depth + 1)
    assert (model.target_calls, model.draft_calls) == (sampled.target_calls, sampled.draft_calls)
    for name in METHODS:
        figures = sampled.methods[name]
        low, high = figures.interval_99
        assert low <= cli[name]["expected_accepted"] <= high, (name, figures)
        assert figures.first_token_p_value >= 0.01, (name, figures.first_token_p_value)
        assert abs(figures.tau_law.sum() - 1.0) < 1e-12


def test_logits_tensors_and_prompts():
    """Logits from the functions (softmaxed by mdsd), prompts as the context
    every prefix starts with, and a cache that answers repeated prefixes."""
    laws = mdsd.MarkovLaws(4, 1, 3)
    seen = []

    def target(prefixes):
        seen.extend(tuple(p) for p in prefixes)
        return np.log(laws.target(prefixes))

    model = mdsd.CallbackModel(target, lambda ps: np.log(laws.draft(ps)), 4)
    first = mdsd.block_efficiency(model, [2, 1], 2, 3, ["bv"], samples=2000, seed=0, batch=100)
    assert all(prefix[:2] == (2, 1) for prefix in seen)
    again = mdsd.block_efficiency(model, [2, 1], 2, 3, ["bv"], samples=2000, seed=0, batch=100)
    # The same draws, every law from the cache.
    assert again.methods["bv"].expected_accepted == first.methods["bv"].expected_accepted
    assert (again.target_calls, again.draft_calls) == (0, 0)
    np.testing.assert_allclose(model.laws("target", [[2, 1, 0]]), laws.target([[2, 1, 0]]),
                               atol=1e-12)


def test_bad_callbacks_are_named():
    laws = mdsd.MarkovLaws(3, 1, 0)

    def wrong_shape(prefixes):
        return np.ones((len(prefixes), 4))

    def raises(prefixes):
        raise RuntimeError("the model server is down")

    def negative(prefixes):
        return -np.ones((len(prefixes), 3))

    for target, needle in [(wrong_shape, "shape"), (raises, "the model server is down"),
                           (negative, "target")]:
        model = mdsd.CallbackModel(target, laws.draft, 3, logits=False)
        with pytest.raises(mdsd.MdsdError, match=needle):
            mdsd.block_efficiency(model, [[0]], 2, 2, ["token"], samples=10)
    model = mdsd.CallbackModel(laws.target, laws.draft, 3, logits=False)
    with pytest.raises(mdsd.MdsdError, match="out of range"):
        mdsd.block_efficiency(model, [[7]], 2, 2, ["token"], samples=10)
    with pytest.raises(mdsd.MdsdError, match="one prompt"):
        mdsd.block_efficiency(model, [[0], [1]], 2, 2, ["token"], samples=None)
    with pytest.raises(mdsd.MdsdError, match="nonesuch"):
        mdsd.block_efficiency(model, [[0]], 2, 2, ["nonesuch"], samples=10)


class Bigram:
    """A small Python n-gram model pair: next-token logits from the last
    token (a random table per model), the draft a blurred copy of the
    target."""

    def __init__(self, vocab, seed):
        rng = np.random.default_rng(seed)
        self.target_table = rng.normal(size=(vocab + 1, vocab)) * 1.5
        self.draft_table = self.target_table + rng.normal(size=(vocab + 1, vocab))

    def _logits(self, table, prefixes):
        return np.stack([table[p[-1] if p else -1] for p in prefixes])

    def target(self, prefixes):
        return self._logits(self.target_table, prefixes)

    def draft(self, prefixes):
        return self._logits(self.draft_table, prefixes)

    def target_law(self, prefix):
        logits = self.target([prefix])[0]
        e = np.exp(logits - logits.max())
        return e / e.sum()


# optimal-convex on wor drafts solves the exponential clocks' double
# integral at every step, too costly for thousands of decoding steps: its
# losslessness is checked by enumeration in the verifier tests.
@pytest.mark.parametrize("verifier,scheme", [
    ("nss", "iid"), ("naive", "iid"), ("specinfer", "iid"), ("kseq", "iid"), ("khisti", "iid"),
    ("optimal-flow", "iid"), ("optimal-convex", "iid"), ("rrs-wor", "wor"), ("nss", "wor"),
])
def test_speculative_decoding_keeps_the_target_law(verifier, scheme):
    vocab, prompt = 6, [3]
    pair = Bigram(vocab, 5)
    model = mdsd.CallbackModel(pair.target, pair.draft, vocab)
    # Many runs from one prompt: the first new token has the target's law.
    runs = 3000
    first = np.array([mdsd.speculative_decode(model, prompt, 1, n=2, verifier=verifier,
                                              scheme=scheme, seed=s)["tokens"][0]
                      for s in range(runs)])
    fit = mdsd._mdsd.goodness_of_fit(np.bincount(first, minlength=vocab), pair.target_law(prompt),
                                    0.01)
    assert fit["p_value"] >= 0.01, (verifier, fit)
    # One long run: tokens per target call against the verifier's
    # acceptance on each step's laws, within the 99% interval of the mean
    # of the steps' Bernoulli acceptances.
    run = mdsd.speculative_decode(model, prompt, 4000, n=2, verifier=verifier, scheme=scheme,
                                  seed=11)
    steps = run["steps"]
    assert run["target_calls"] <= steps and run["draft_calls"] <= steps
    predicted = run["predicted_tokens_per_target_call"] - 1.0
    half_width = 2.5758 * np.sqrt(predicted * (1 - predicted) / steps) + 1.0 / steps
    measured = run["tokens_per_target_call"] - 1.0
    assert abs(measured - predicted) <= half_width, (run, half_width)
    if verifier == "optimal-convex":
        assert abs(run["predicted_tokens_per_target_call"] - 1.0 - run["alpha_star"]) < 1e-6


@pytest.mark.parametrize("seed", [3, 5])
def test_traversal_and_hsd_through_callbacks(seed):
    """On one path Traversal Verification is block verification (1e-12);
    HSD as published is lossy on these context-dependent laws, and its
    report shows it (docs/blocks.md)."""
    laws = mdsd.MarkovLaws(3, 1, seed)
    model = mdsd.CallbackModel(laws.target, laws.draft, 3, logits=False)
    exact = mdsd.block_efficiency(model, [[]], 3, 1, ["bv", "traversal", "hsd"], samples=None)
    bv, traversal, hsd = (exact.methods[m] for m in ("bv", "traversal", "hsd"))
    assert abs(traversal.expected_accepted - bv.expected_accepted) < 1e-12
    assert traversal.max_law_error < 1e-12
    assert hsd.max_law_error > 1e-4
    assert hsd.expected_accepted > bv.expected_accepted


@pytest.mark.parametrize("children,methods", [("wor", ["traversal", "rrs-wor"]),
                                              ("iid", ["specinfer", "optimal-convex"]),
                                              ("top", ["deterministic"])])
def test_trees_through_callbacks_match_mdsd_block(mdsd_binary, children, methods):
    """A static tree drafted through callbacks: exact mode equals `mdsd block
    --tree` on the same Markov model, and sampled mode lands in its 99%
    interval."""
    laws = mdsd.MarkovLaws(3, 1, 5)
    out = subprocess.run(
        [str(mdsd_binary), "block", "--markov", "5", "--markov-vocab", "3", "--order", "1",
         "--tree", "2,2", "--children", children, "--methods", ",".join(methods), "--json"],
        check=True, capture_output=True, text=True)
    cli = {m["name"]: m for m in json.loads(out.stdout)["methods"]}
    model = mdsd.CallbackModel(laws.target, laws.draft, 3, logits=False)
    exact = mdsd.block_efficiency(model, [[]], 2, methods=methods, tree=[2, 2],
                                  children=children, samples=None)
    sampled = mdsd.block_efficiency(model, [[]], 2, methods=methods, tree=[2, 2],
                                    children=children, samples=5_000, seed=2, batch=500)
    for name in methods:
        assert abs(exact.methods[name].expected_accepted - cli[name]["expected_accepted"]) < 1e-12
        assert exact.methods[name].max_law_error < 1e-12, name
        low, high = sampled.methods[name].interval_99
        assert low <= cli[name]["expected_accepted"] <= high, name


def test_tree_arguments_are_checked():
    laws = mdsd.MarkovLaws(3, 1, 5)
    model = mdsd.CallbackModel(laws.target, laws.draft, 3, logits=False)
    blocks = lambda **k: mdsd.block_efficiency(model, [[]], **{"depth": 2, "methods": ["bv"],
                                                                "samples": 10, **k})
    with pytest.raises(mdsd.MdsdError, match="paths=2 and tree"):
        blocks(paths=2, tree=[2, 2])
    with pytest.raises(mdsd.MdsdError, match=r"tree\[1\]"):
        blocks(tree=[2, 0])
    with pytest.raises(mdsd.MdsdError, match="children: unknown draft scheme"):
        blocks(tree=[2, 2], children="sideways")
    with pytest.raises(mdsd.MdsdError, match="one branching factor per draft depth"):
        blocks(tree=[2, 2, 2])
    with pytest.raises(mdsd.MdsdError, match="top-k children are not drawn"):
        blocks(tree=[2, 2], children="top")
    with pytest.raises(TypeError, match="tree"):
        blocks(tree="2,2")
