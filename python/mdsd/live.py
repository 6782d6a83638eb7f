"""Live model pairs: blocks of draft tokens on the paths a real draft model
draws, and speculative decoding with any built-in verifier.

A model pair is two batched functions, ``target(prefixes)`` and
``draft(prefixes)``: a list of token-id lists in, ``[len(prefixes), V]``
logits (or probabilities) out, as numpy arrays or tensors (CUDA tensors
are copied to the host). :class:`CallbackModel` wraps them, keeps the laws
of repeated prefixes, and batches every node of a draft tree into as few
calls as it can: a round of blocks costs L + 1 calls of the draft and one
of the target, whatever the number of paths.

>>> import mdsd
>>> laws = mdsd.MarkovLaws(3, 1, 7)          # mdsd block --markov 7 --order 1
>>> model = mdsd.CallbackModel(laws.target, laws.draft, 3, logits=False)
>>> report = mdsd.block_efficiency(model, [[]], depth=2, paths=2, samples=None)
>>> report.methods["bv"].max_law_error < 1e-12
True
"""

import time

import numpy as np

from . import _mdsd
from ._mdsd import MdsdError
from ._rows import text, token_array, token_ids, whole
from .optimum import alpha_star
from .results import BlockEfficiency
from .verifier import Verifier, optimal_rules

BLOCK_METHODS = ("token", "bv", "gbv", "specinfer", "optimal-convex")


def _host_rows(x, side):
    """A C-contiguous float64 ``[batch, V]`` array of a function's answer:
    tensors are detached and copied to the host."""
    if hasattr(x, "detach"):
        x = x.detach().to("cpu").double()
    array = np.asarray(x, dtype=np.float64)
    if array.ndim != 2:
        raise MdsdError(f"the {side} function returned shape {array.shape}, not [batch, V]")
    return np.ascontiguousarray(array)


def _batched(function, side):
    def call(prefixes):
        return _host_rows(function(prefixes), side)
    return call


class CallbackModel:
    """A target and draft model behind two batched functions
    ``fn(prefixes) -> [len(prefixes), V]`` (logits by default; ``logits=
    False`` for probabilities, whose rows must sum to 1 within 1e-6).
    The laws of up to ``cache_size`` prefixes are kept (each V float64:
    1.2 MB at V = 151936), so a prefix reached again costs no call;
    ``.target_calls`` and ``.draft_calls`` count the calls that reached the
    functions, ``.laws(side, prefixes)`` answers from the cache or the
    functions."""

    def __init__(self, target, draft, vocab_size, *, logits=True, cache_size=4096):
        self._native = _mdsd.CallbackModel(_batched(target, "target"), _batched(draft, "draft"),
                                           whole(vocab_size, "vocab_size", 1), bool(logits),
                                           whole(cache_size, "cache_size"))

    @property
    def vocab_size(self):
        return self._native.vocab_size

    @property
    def target_calls(self):
        return self._native.target_calls

    @property
    def draft_calls(self):
        return self._native.draft_calls

    def laws(self, side, prefixes):
        """The laws of ``side`` ("target" or "draft") after each prefix,
        ``[len(prefixes), V]``."""
        return self._native.laws(text(side, "side"),
                                 [token_ids(p, f"prefixes[{i}]") for i, p in enumerate(prefixes)])

    def __repr__(self):
        return (f"CallbackModel(vocab_size={self.vocab_size}, target_calls={self.target_calls}, "
                f"draft_calls={self.draft_calls})")


def _round(sampler, paths, seed):
    """A user's block sampler as the native module calls it once a round:
    the arrays with their path axis (dropped for one path), a generator per
    round, the answer as int64 ``[B, L+1]``."""
    def call(target_probs, draft_probs, draft_token_ids, round_number):
        if paths == 1:
            target_probs, draft_probs = target_probs[:, 0], draft_probs[:, 0]
            draft_token_ids = draft_token_ids[:, 0]
        rng = np.random.default_rng([seed, round_number])
        output = sampler(target_probs, draft_probs, draft_token_ids, rng)
        return np.ascontiguousarray(token_array(output, f"{_name(sampler)}'s output"))
    return call


def _name(sampler):
    return getattr(sampler, "__name__", type(sampler).__name__)


def block_efficiency(model, prompts, depth, paths=1, methods=BLOCK_METHODS, *, tree=None,
                     children="wor", samples=10_000, seed=0, batch=64):
    """Blocks of ``paths`` draft paths of ``depth`` tokens on a live model
    pair (:func:`CallbackModel`), verified by every method on the same
    drafted trees with the same random numbers: ``token`` (token by token
    along the first path), ``bv`` (block verification), ``gbv`` (greedy
    block verification), ``traversal`` (Traversal Verification, one path),
    ``hsd`` (HSD as its reference code verifies, not lossless), and any
    token-level verifier composed over the tree (``specinfer``,
    ``optimal-convex``, ``rrs-wor``, ``deterministic``, ...).

    ``tree=[4, 2, 2, 1]`` drafts a static tree instead of ``paths`` i.i.d.
    paths: every node at depth d gets ``tree[d]`` children, drawn
    ``children="iid"``, ``"wor"`` (without replacement) or ``"top"`` (the
    draft's top-k); ``depth`` must be ``len(tree)``. A method that does not
    read the shape is refused with the reason.

    A method may also be your own block sampler in vLLM's layout, as
    ``check_block_verifier`` calls it (``fn(target_probs, draft_probs,
    draft_token_ids, rng) -> [B, L+1]``), called once a round on the same
    drafted trees as the built-in methods (sampled mode, K i.i.d. paths):
    its figures are under its ``__name__``.

    ``prompts`` is a list of token-id lists (or one list of ints); block b
    is drafted after ``prompts[b % len(prompts)]``. Sampled mode draws
    ``samples`` blocks, ``batch`` of them drafted together (one call per
    depth for all of them); ``samples=None`` is exact mode: every prefix of
    up to ``depth`` tokens after the one prompt is asked for (L + 1 calls
    per model, V^L prefixes: small V only) and every tuple of paths
    enumerated, which checks the output law of whole blocks."""
    if not isinstance(model, CallbackModel):
        raise TypeError(f"model: expected a CallbackModel, got {type(model).__name__}")
    if len(prompts) > 0 and all(isinstance(t, (int, np.integer)) for t in prompts):
        prompts = [prompts]
    prompts = [token_ids(prompt, f"prompts[{i}]") for i, prompt in enumerate(prompts)]
    if isinstance(methods, str):
        methods = [methods]
    paths = whole(paths, "paths", 1)
    custom = [(_name(m), _round(m, paths, whole(seed, "seed"))) for m in methods if callable(m)]
    methods = [m for m in methods if not callable(m)]
    if custom and (samples is None or tree is not None):
        raise MdsdError(f"methods: {custom[0][0]} is your own sampler, which block_efficiency "
                        "runs in sampled mode on i.i.d. paths (samples=N, no tree); "
                        "check_block_verifier(exact=True) enumerates one")
    if tree is not None:
        if paths != 1:
            raise MdsdError(f"paths={paths} and tree: a block drafts i.i.d. paths or a static "
                            "tree; pass one of them")
        if isinstance(tree, (str, bytes)) or not hasattr(tree, "__len__"):
            raise TypeError(f"tree: expected a list of children per depth, got "
                            f"{type(tree).__name__}")
        tree = [whole(b, f"tree[{d}]", 1) for d, b in enumerate(tree)]
    result = _mdsd.block_efficiency(model._native, prompts, whole(depth, "depth", 1), paths,
                                    tree, text(children, "children"),
                                    [text(m, "methods") for m in methods], custom,
                                    None if samples is None else whole(samples, "samples", 1),
                                    whole(seed, "seed"), whole(batch, "batch", 1))
    return BlockEfficiency.of(result, exact=samples is None)


def _draw(q, n, scheme, rng):
    """n draft tokens from q: i.i.d., or without replacement (successive
    draws, each from q restricted to the tokens not yet drawn)."""
    if scheme == "iid":
        return [int(t) for t in rng.choice(len(q), size=n, p=q)]
    if scheme == "wor":
        return [int(t) for t in rng.choice(len(q), size=n, replace=False, p=q)]
    raise MdsdError(f"speculative_decode drafts iid or wor, not {scheme!r}")


def speculative_decode(model, prompt, max_new_tokens, *, n=2, verifier="specinfer",
                       scheme="iid", seed=0, **params):
    """Multi-draft speculative decoding on a live model pair
    (:func:`CallbackModel`): each step draws ``n`` draft tokens from the
    draft's law after the context (``scheme`` "iid" or "wor"), asks the
    target for its laws after the context and after each distinct draft
    (one batched call), verifies with the built-in ``verifier``
    (:func:`mdsd.Verifier`; ``params`` as it takes them; "optimal-convex"
    goes through :func:`mdsd.optimal_rules`, the batch of a decoding step,
    and takes ``max_gap`` and ``budget_ms``) and, when a draft is
    accepted, appends one more token from the target's law after it.
    Every token is distributed as the target's law after the tokens before
    it, and a step yields 1 + [a draft accepted] tokens per target call,
    whose expectation is 1 + the verifier's acceptance on the step's laws
    (alpha* for ``optimal-convex``).

    Returns a dict: ``tokens`` (the new ones), ``steps``, ``accepted``
    (steps with a draft accepted), ``target_calls`` and ``draft_calls``
    (that reached the model's functions; repeated prefixes come from the
    cache), ``tokens_per_target_call`` (tokens per step: one target call
    each), ``predicted_tokens_per_target_call`` (1 + the mean over steps of
    the verifier's exact acceptance on that step's laws; NaN for a verifier
    rated only by sampling), ``alpha_star`` (the mean over steps of
    alpha*) and ``step_ms``, the mean milliseconds of a step's parts:
    ``draft`` (the draft's law and the drafts), ``target`` (the target's
    laws), ``verifier`` (preparing the verifier on the step's laws and
    verifying the drafts) and ``bonus`` (the token after an accepted
    draft); rating the step (alpha*, the exact acceptance) is not timed."""
    if not isinstance(model, CallbackModel):
        raise TypeError(f"model: expected a CallbackModel, got {type(model).__name__}")
    prompt = token_ids(prompt, "prompt")
    max_new_tokens = whole(max_new_tokens, "max_new_tokens", 1)
    n = whole(n, "n", 1)
    rng = np.random.default_rng(whole(seed, "seed"))
    context = list(prompt)
    new = []
    target_before, draft_before = model.target_calls, model.draft_calls
    accepted = steps = 0
    predicted, optimum = [], []
    spent = dict.fromkeys(("draft", "target", "verifier", "bonus"), 0.0)
    clock = time.perf_counter
    while len(new) < max_new_tokens:
        start = clock()
        q = model.laws("draft", [context])[0]
        drafts = _draw(q, n, scheme, rng)
        drawn = clock()
        distinct = sorted(set(drafts))
        rows = model.laws("target", [context] + [context + [d] for d in distinct])
        p, after = rows[0], dict(zip(distinct, rows[1:]))
        laws = clock()
        token, acceptance = _verify(verifier, p, q, n, scheme, drafts,
                                    int(rng.integers(2**63)), params)
        verified = clock()
        spent["draft"] += drawn - start
        spent["target"] += laws - drawn
        spent["verifier"] += verified - laws
        predicted.append(acceptance())
        optimum.append(alpha_star(p, q, n, scheme))
        steps += 1
        new.append(token)
        if token in after and len(new) < max_new_tokens:
            accepted += 1
            start = clock()
            bonus = after[token]
            new.append(int(rng.choice(len(bonus), p=bonus)))
            spent["bonus"] += clock() - start
        context = prompt + new
    target_calls = model.target_calls - target_before
    return {
        "tokens": new,
        "steps": steps,
        "accepted": accepted,
        "target_calls": target_calls,
        "draft_calls": model.draft_calls - draft_before,
        "tokens_per_target_call": len(new) / steps,
        "predicted_tokens_per_target_call": 1.0 + float(np.mean(predicted)),
        "alpha_star": float(np.mean(optimum)),
        "step_ms": {part: 1e3 * seconds / steps for part, seconds in spent.items()},
    }


def _verify(verifier, p, q, n, scheme, drafts, seed, params):
    """The verifier's token for ``drafts`` on one step's laws, and a
    function that rates it (its exact acceptance, NaN where there is
    none), called outside the step's timing. The optimal verifier goes
    through the batch of a decoding step (one row here)."""
    if verifier == "optimal-convex":
        rules = optimal_rules(p[None], q[None], n, scheme, **params)
        token = int(rules.sample(np.asarray([drafts]), seed=seed)[0])
        return token, lambda: float(rules.acceptance[0])
    chosen = Verifier(verifier, p, q, n, scheme, **params)
    token = chosen.sample(drafts, seed=seed)
    return token, lambda: np.nan if chosen.acceptance is None else chosen.acceptance
