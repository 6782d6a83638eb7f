"""mdsd: the optimal acceptance of multi-draft speculative sampling.

A target model p and a draft model q propose next-token laws; a draft
scheme draws n draft tokens from q; a lossless verifier outputs one token
distributed exactly as p. ``alpha_star`` is the best acceptance any
lossless verifier can reach, ``certificate`` the set H* that proves it
(alpha* = p(H*) + 1 - Q(all drafts in H*)).

>>> import numpy as np, mdsd
>>> round(mdsd.alpha_star([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], n=2), 12)
0.86
"""

import os

import numpy as np

from ._mdsd import MdsdError
from . import _mdsd
from .live import (BlockEfficiency, CallbackModel, MarkovLaws, MethodFigures, block_efficiency,
                   speculative_decode)

__all__ = [
    "BlockEfficiency", "CallbackModel", "Evaluation", "MarkovLaws", "MdsdError", "MethodFigures",
    "Solution", "Verifier", "VerifierReport", "alpha_star", "block_efficiency", "certificate",
    "check_verifier", "evaluate", "evaluate_file", "solve", "speculative_decode",
]


def _stored(*arrays):
    """The coarsest float type among the caller's rows, before widening:
    it sets how far from 1 a row of probabilities may sum."""
    names = [str(getattr(a, "dtype", "float64")).replace("torch.", "") for a in arrays]
    for coarse in ("float16", "bfloat16", "float32"):
        if coarse in names:
            return coarse
    return "float64"


def _rows(x, name):
    """A float32 or float64 numpy array of ``x``, in place where it is one
    already (numpy arrays, CPU tensors through ``__array__`` or
    ``__dlpack__``); float16 and bfloat16 are widened to float32."""
    device = getattr(x, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        raise MdsdError(f"{name} is on {device}: mdsd reads host memory, call .cpu() first")
    if hasattr(x, "detach"):
        x = x.detach()
    if str(getattr(x, "dtype", "")) == "torch.bfloat16":
        x = x.float()
    try:
        array = np.asarray(x)
    except (TypeError, RuntimeError):
        array = np.from_dlpack(x)
    if array.dtype == np.float16:
        array = array.astype(np.float32)
    elif array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
    return array


def _drafts(q, scheme):
    """One draft model's rows, or with independent drafts a list of them."""
    if scheme == "independent":
        return [_rows(x, f"q[{i}]") for i, x in enumerate(q)]
    return [_rows(q, "q")]


def _settings(p, q, n, scheme, logits, temperature, top_k, top_p, draft_temperature,
              draft_top_k, draft_top_p):
    """What every call passes besides the rows."""
    return {
        "n": n, "scheme": scheme, "stored": _stored(p, *(q if scheme == "independent" else [q])),
        "logits": logits, "temperature": temperature, "top_k": top_k, "top_p": top_p,
        "draft_temperature": draft_temperature, "draft_top_k": draft_top_k,
        "draft_top_p": draft_top_p,
    }


def alpha_star(p, q, n, scheme="iid", *, logits=False, temperature=None, top_k=None, top_p=None,
               draft_temperature=None, draft_top_k=None, draft_top_p=None):
    """alpha*, the best acceptance of any lossless verifier with ``n`` drafts.

    ``p`` and ``q`` are rows ``[..., V]`` of probabilities (or logits with
    ``logits=True``): numpy arrays of float16/32/64, CPU tensors, lists.
    Returns a float for one row, else an array of the leading shape
    (``[B, T, V]`` gives ``[B, T]``). ``scheme``: "iid", "wor", "greedy",
    "hub", "argmax", "top", or "independent" with ``q`` a list of arrays,
    one per draft. ``temperature``, ``top_k``, ``top_p`` transform both
    sides; the ``draft_`` ones replace them on the draft's side.

    >>> round(mdsd.alpha_star([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], n=2), 12)
    0.86
    """
    settings = _settings(p, q, n, scheme, logits, temperature, top_k, top_p, draft_temperature,
                         draft_top_k, draft_top_p)
    result = _mdsd.alpha_star(_rows(p, "p"), _drafts(q, scheme), settings)
    return float(result) if result.ndim == 0 else result


def certificate(p, q, n, scheme="iid", *, logits=False, temperature=None, top_k=None, top_p=None,
                draft_temperature=None, draft_top_k=None, draft_top_p=None):
    """H*, the set that certifies alpha*, as a boolean mask ``[..., V]``:
    alpha* = p(H*) + 1 - Q(all drafts in H*). Arguments as ``alpha_star``.

    >>> mdsd.certificate([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], n=2).tolist()
    [False, True, True]
    """
    settings = _settings(p, q, n, scheme, logits, temperature, top_k, top_p, draft_temperature,
                         draft_top_k, draft_top_p)
    return _mdsd.certificate(_rows(p, "p"), _drafts(q, scheme), settings)


# The preparation settings each verifier reads, by the names ``solve`` uses.
_VERIFIER_PARAMS = {"khisti": {"truncation"}, "optimal-convex": {"tol"},
                    "optimal-flow": {"max_sets"}}


def Verifier(name, p, q, n, scheme="iid", *, logits=False, temperature=None, top_k=None,
             top_p=None, draft_temperature=None, draft_top_k=None, draft_top_p=None, **params):
    """A built-in verifier (``"specinfer"``, ``"kseq"``, ``"khisti"``,
    ``"optimal-convex"``, ``"optimal-flow"``, ...) prepared for one row of
    p and q: ``.conditional(drafts)`` the output law over the vocabulary,
    ``.sample(drafts, seed=None)`` one token, ``.sample_batch(drafts,
    seed=None)`` one token per row of an int array ``[B, n]`` (in
    parallel, without the GIL), ``.acceptance`` (closed form or exact
    enumeration; None past its limit) and ``.name``.

    ``params`` set how it is prepared: ``truncation`` for "khisti" (pairs
    among that many most likely draft tokens, 1 to 15), ``tol`` for
    "optimal-convex" (the convex solver's tolerance), ``max_sets`` for
    "optimal-flow" (the flow network's budget of draft sets).

    >>> v = mdsd.Verifier("optimal-convex", [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2)
    >>> round(v.acceptance, 6), round(float(v.conditional([2, 2]).sum()), 12)
    (0.86, 1.0)
    """
    known = _VERIFIER_PARAMS.get(name, set())
    for key in params:
        if key not in known:
            takes = f"takes {', '.join(sorted(known))}" if known else "takes none"
            raise MdsdError(f"Verifier {name!r}: no setting {key!r} ({name} {takes})")
    settings = _settings(p, q, n, scheme, logits, temperature, top_k, top_p, draft_temperature,
                         draft_top_k, draft_top_p)
    prepared = {"truncation": params.get("truncation"), "tolerance": params.get("tol"),
                "max_sets": params.get("max_sets")}
    return _mdsd.Verifier(name, _rows(p, "p"), _drafts(q, scheme), settings, prepared)


class Solution:
    """What ``solve`` found: ``alpha_star``, ``acceptance`` (what the
    method's verifier reaches), ``certificate`` (H* as a bool mask),
    ``status`` ("optimal", "converged", "certificate-unverified"),
    ``iterations``, ``elapsed_ms``, and for lp and flow ``plan``: a dict of
    ``drafts`` (the draft tuples or sets), ``probs`` (their probability)
    and ``conditional`` (the output law given each, ``[outcomes, V]``)."""

    def __init__(self, fields, vocab_size):
        self.alpha_star = fields["alpha_star"]
        self.acceptance = fields["acceptance"]
        self.certificate = np.zeros(vocab_size, dtype=bool)
        self.certificate[fields["certificate"]] = True
        self.status = fields["status"]
        self.iterations = fields["iterations"]
        self.elapsed_ms = fields["elapsed_ms"]
        self.plan = fields.get("plan")

    def __repr__(self):
        return (f"Solution(alpha_star={self.alpha_star!r}, acceptance={self.acceptance!r}, "
                f"status={self.status!r}, |H*|={int(self.certificate.sum())})")


def solve(p, q, n, method="lp", scheme="iid", *, logits=False, temperature=None, top_k=None,
          top_p=None, draft_temperature=None, draft_top_k=None, draft_top_p=None,
          formulation="full", max_variables=None, max_sets=None, decomposed=False, tol=None):
    """One row solved by an exact method, ``method="lp"`` (``formulation``
    "full" or "relaxed", ``max_variables``) or ``"flow"`` (``max_sets``,
    ``decomposed``), or by the convex programs (``"convex"``, ``tol``), as
    ``mdsd solve --method`` does (unset settings take its defaults);
    returns a ``Solution``.

    >>> s = mdsd.solve([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2, method="flow")
    >>> round(s.alpha_star, 12), s.certificate.tolist(), s.plan["conditional"].shape
    (0.86, [False, True, True], (6, 3))
    """
    settings = _settings(p, q, n, scheme, logits, temperature, top_k, top_p, draft_temperature,
                         draft_top_k, draft_top_p)
    solver = {"method": method, "formulation": formulation, "max_variables": max_variables,
              "max_sets": max_sets, "decomposed": decomposed, "tolerance": tol}
    p = _rows(p, "p")
    fields = _mdsd.solve(p, _drafts(q, scheme), settings, solver)
    return Solution(fields, p.shape[-1])


class Evaluation(dict):
    """What ``evaluate`` and ``evaluate_file`` compute, as ``mdsd eval``
    does: a dict of numpy arrays. ``"n"``: the numbers of drafts;
    ``"alpha_star/<scheme>"``: alpha* per row and n, shape ``[..., len(n)]``
    (the rows' leading shape); ``"acceptance/<verifier>"``: the verifier's
    acceptance on ``"scheme/<verifier>"`` (the first of iid, wor, greedy,
    top it runs on), exact where a closed form gives it, else sampled, with
    its 99% Wilson interval in ``"acceptance_low/<verifier>"`` and
    ``"acceptance_high/<verifier>"`` (NaN where exact); ``"failures"``: a
    ``(row, stage, error)`` tuple per row that failed at some stage, whose
    values there are NaN. ``to_pandas()`` gives one row per position and n
    (pandas is not a dependency)."""

    def to_pandas(self):
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Evaluation.to_pandas needs pandas (pip install pandas); "
                              "mdsd itself does not") from None
        ns = self["n"]
        arrays = {key: value for key, value in self.items()
                  if isinstance(value, np.ndarray) and key != "n"}
        rows = int(np.prod(next(iter(arrays.values())).shape[:-1])) if arrays else 0
        frame = {"row": np.repeat(np.arange(rows), len(ns)), "n": np.tile(ns, rows)}
        frame.update({key: value.reshape(-1) for key, value in arrays.items()})
        return pd.DataFrame(frame)


_EVAL_SCHEMES = ("iid", "wor", "greedy", "argmax", "top")
_EVAL_VERIFIERS = ("specinfer", "optimal-convex")


def evaluate(p, q, n=(1, 2, 4, 8), schemes=_EVAL_SCHEMES, verifiers=_EVAL_VERIFIERS, *,
             logits=False, temperature=None, top_k=None, top_p=None, draft_temperature=None,
             draft_top_k=None, draft_top_p=None, samples=20_000, seed=0):
    """alpha* of each draft scheme and the acceptance of each verifier at
    each number of drafts ``n``, for every row of ``p`` and ``q`` (``[...,
    V]``, as ``alpha_star`` takes them): what ``mdsd eval`` computes, as an
    ``Evaluation`` (a dict of arrays ``[..., len(n)]``). A verifier without
    a closed form is sampled, ``samples`` draws per row and n, row r seeded
    with ``seed + r`` as ``mdsd eval`` seeds it. A verifier is rated on
    the first of iid, wor, greedy, top it supports, or on the scheme named
    as ``"name@scheme"`` (``"optimal-convex@wor"``; its keys keep that
    name). With ``"independent"`` among the schemes or verifiers, ``q`` is
    a list of draft laws taken in turn (draft i from the (i mod m)-th);
    the other schemes draw from the first; independent alpha* is exact
    where the closed form or max flow scales, else the upper end of the
    convex solver's certified interval, as ``mdsd eval`` gives it.

    >>> e = mdsd.evaluate([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], n=[1, 2], schemes=["iid"])
    >>> e["alpha_star/iid"].round(6).tolist(), e["acceptance/specinfer"].round(6).tolist()
    ([0.7, 0.86], [0.7, 0.76])
    """
    ns = [int(k) for k in np.atleast_1d(n)]
    independent = "independent" in schemes or any(v.endswith("@independent") for v in verifiers)
    laws = _drafts(q, "independent" if independent else "iid")
    settings = _settings(p, laws[0], ns[0] if ns else 1, "iid", logits, temperature, top_k,
                         top_p, draft_temperature, draft_top_k, draft_top_p)
    fields = _mdsd.evaluate(_rows(p, "p"), laws, settings, ns,
                            list(schemes), list(verifiers), int(samples), int(seed))
    return Evaluation(n=np.array(ns), **fields)


def evaluate_file(path, n=(1, 2, 4, 8), schemes=_EVAL_SCHEMES, verifiers=_EVAL_VERIFIERS, *,
                  first_row=0, rows=None, temperature=None, top_k=None, top_p=None,
                  draft_temperature=None, draft_top_k=None, draft_top_p=None, samples=20_000,
                  seed=0):
    """``evaluate`` over the rows of a data file, as ``mdsd eval --data``
    reads it (``.npz``, ``.safetensors``, a directory of ``.npy`` files or
    of shards; logits or probabilities as the file says): ``rows`` rows
    from ``first_row`` (all by default), read a window at a time so that
    files larger than memory go through. The arrays are ``[rows, len(n)]``;
    with the same settings the numbers are ``mdsd eval --json``'s per-row
    values.
    """
    ns = [int(k) for k in np.atleast_1d(n)]
    settings = {"n": 1, "scheme": "iid", "stored": "float64", "logits": False,
                "temperature": temperature, "top_k": top_k, "top_p": top_p,
                "draft_temperature": draft_temperature, "draft_top_k": draft_top_k,
                "draft_top_p": draft_top_p}
    fields = _mdsd.evaluate_file(os.fspath(path), settings, ns, list(schemes), list(verifiers),
                                 int(samples), int(seed), int(first_row),
                                 None if rows is None else int(rows))
    return Evaluation(n=np.array(ns), **fields)


class VerifierReport:
    """What ``check_verifier`` found, in either mode.

    Both modes: ``mode`` ("exact" or "sampling"), ``lossless``,
    ``acceptance``, ``alpha_star``, ``gap`` (alpha* - acceptance),
    ``instances``. Exact mode: ``max_marginal_error`` (the largest
    |output marginal - p|), ``max_law_error`` (how far a conditional is
    from a law), ``worst`` (the p, q and error of the instance furthest
    from p); ``lossless`` when both are within 1e-9. Sampling mode:
    ``samples``, ``p_value`` and ``statistic`` (Pearson's chi-square of the
    output against p over ``degrees_of_freedom``), ``level`` (``lossless``
    when ``p_value >= level``), ``detectable_tv`` (the smallest total
    variation from p the test detects with 99% power at this sample size:
    what a pass rules out), ``acceptance_interval`` (Wilson, 99%), and the
    negative control: ``control_p_value`` of the same run against a target
    moved ``control_tv`` from p, ``control_detected`` (False: the test had
    no power, or the verifier does not read its p). Fields of the other
    mode are None. ``to_dict()`` gives them as a dict."""

    TOLERANCE = 1e-9
    _FIELDS = ("mode", "lossless", "acceptance", "alpha_star", "gap", "instances",
               "max_marginal_error", "max_law_error", "samples", "p_value", "statistic",
               "degrees_of_freedom", "level", "detectable_tv", "acceptance_interval",
               "control_p_value", "control_tv", "control_detected")

    def __init__(self, **fields):
        for key in self._FIELDS:
            setattr(self, key, fields.get(key))
        self.worst = fields.get("worst")
        self.gap = self.alpha_star - self.acceptance

    @classmethod
    def _exact(cls, errors, law_errors, acceptances, alphas, worst):
        max_marginal_error, max_law_error = float(max(errors)), float(max(law_errors))
        return cls(mode="exact", instances=len(errors), max_marginal_error=max_marginal_error,
                   max_law_error=max_law_error,
                   lossless=max(max_marginal_error, max_law_error) <= cls.TOLERANCE,
                   acceptance=float(np.mean(acceptances)), alpha_star=float(np.mean(alphas)),
                   worst=worst)

    def to_dict(self):
        return {key: getattr(self, key) for key in self._FIELDS}

    def __repr__(self):
        verdict = "lossless" if self.lossless else "NOT lossless"
        rows = [("verdict", verdict)]
        if self.mode == "exact":
            rows += [("instances", self.instances),
                     ("max |output - p|", f"{self.max_marginal_error:.3e}"),
                     ("max law error", f"{self.max_law_error:.3e}"),
                     ("acceptance", f"{self.acceptance:.12f}")]
        else:
            low, high = self.acceptance_interval
            rows += [("samples", self.samples),
                     ("chi2 p-value", f"{self.p_value:.3e} (level {self.level}, "
                                      f"{self.degrees_of_freedom} degrees of freedom)"),
                     ("detectable TV", f"{self.detectable_tv:.3e} (99% power)"),
                     ("acceptance", f"{self.acceptance:.6f} [{low:.6f}, {high:.6f}] 99%")]
            if self.control_detected is not None:
                control = "detected" if self.control_detected else (
                    "NOT detected: the test had no power here (more samples), or the "
                    "verifier does not read its p")
                rows.append(("negative control", f"target moved {self.control_tv:.2e} in TV: "
                                                 f"p-value {self.control_p_value:.3e}, {control}"))
        rows += [("alpha*", f"{self.alpha_star:.12f}"), ("gap to alpha*", f"{self.gap:.3e}")]
        return "\n".join(f"{name:<18}{value}" for name, value in rows)


def _tuples(q, n, scheme):
    """Every ordered draft tuple with its probability: i.i.d., without
    replacement, or one draft from each law of ``q`` (independent)."""
    import itertools

    if scheme in ("iid", "independent"):
        laws = q if scheme == "independent" else [q] * n
        for drafts in itertools.product(range(len(laws[0])), repeat=n):
            weight = float(np.prod([law[x] for law, x in zip(laws, drafts)]))
            # Drafts that cannot be drawn say nothing of the verifier.
            if weight > 0:
                yield drafts, weight
    elif scheme == "wor":
        for drafts in itertools.permutations(range(len(q)), n):
            weight, left = 1.0, np.ones(len(q), dtype=bool)
            for token in drafts:
                # The mass not yet drawn, summed as it is rather than as
                # 1 - the mass drawn, which cancels when q is peaked.
                rest = q[left].sum()
                weight *= q[token] / rest if rest > 0 else 0.0
                left[token] = False
            if weight > 0:
                yield drafts, weight
    else:
        raise MdsdError(f"scheme {scheme!r}: check_verifier enumerates iid, wor and independent "
                        "drafts")


def _random_instances(count, n, scheme, seed):
    """Small random (p, q): 2 to 5 tokens, laws from flat to peaked, and
    now and then a zero or a tie, where verifiers tend to break."""
    rng = np.random.default_rng(seed)
    for k in range(count):
        v = int(rng.integers(max(2, n if scheme == "wor" else 2), 6))
        concentration = [0.2, 1.0, 5.0][k % 3]
        p = rng.dirichlet(np.full(v, concentration))
        q = rng.dirichlet(np.full(v, concentration))
        if k % 5 == 4:
            p[rng.integers(v)] = 0.0
            p /= p.sum()
        if k % 7 == 6:
            q[:] = p
        if scheme == "independent":
            q = [q] + [rng.dirichlet(np.full(v, concentration)) for _ in range(n - 1)]
        yield p, q


def check_verifier(verifier, p=None, q=None, n=2, scheme="iid", *, samples=None, seed=0,
                   instances=200, batched=False, batch_size=8192, level=0.01, control=True):
    """Whether a verifier preserves the target distribution, and how far
    its acceptance is from alpha*. Returns a ``VerifierReport``.

    Exact mode (``samples=None``): ``verifier(p, q, drafts)`` returns the
    output law (an array over the vocabulary) given the drafts, a tuple of
    ``n`` token ids. Every draft tuple of ``scheme`` ("iid", "wor", or
    "independent" with ``q`` a list of ``n`` laws) is enumerated with its
    probability, for the given ``p``, ``q`` (1-D, V^n at
    most 10^6), or else for ``instances`` random small ones drawn from
    ``seed`` (2 to 5 tokens, flat to peaked, with zeros and ties); the
    output marginal sum_drafts P(drafts) law(drafts) is compared with p and
    the acceptance with alpha*. Lossless means within 1e-9 everywhere.

    Sampling mode (``samples=N``), at any vocabulary size:
    ``verifier(p, q, drafts, rng)`` returns one output token for a tuple of
    drafts, with ``rng`` a ``numpy.random.Generator`` it may draw from. With
    ``batched=True`` it takes ``drafts`` as an int64 array ``[B, n]`` (B at
    most ``batch_size``) and returns ``[B]`` tokens, which is how a verifier
    at V = 151936 checks 10^5 samples in seconds. mdsd draws the N draft
    tuples from ``q`` by ``scheme`` (any scheme; ``q`` a list for
    "independent"), tests the outputs against p with Pearson's chi-square
    (``p_value``; lossless when it is at least ``level``), reports
    ``detectable_tv``, the smallest total variation from p the test would
    detect with 99% power at N (a pass rules out that much, not less), the
    acceptance with its 99% Wilson interval, and with ``control=True`` a
    negative control: the same drafts given a target moved 1.5 times
    ``detectable_tv`` from p must fail the test against p, else the report
    says the test had no power. ``p`` and ``q`` default to a random pair at
    V = 1000.

    >>> report = mdsd.check_verifier(
    ...     lambda p, q, drafts: mdsd.Verifier("specinfer", p, q, len(drafts)).conditional(drafts),
    ...     instances=20)
    >>> report.lossless
    True
    >>> def specinfer(p, q, drafts, rng):
    ...     return mdsd.Verifier("specinfer", p, q, drafts.shape[1]).sample_batch(
    ...         drafts, seed=int(rng.integers(2**63)))
    >>> report = mdsd.check_verifier(specinfer, samples=20_000, batched=True)
    >>> report.lossless, report.control_detected
    (True, True)
    """
    if samples is not None:
        return _check_sampled(verifier, p, q, n, scheme, samples, seed, batched, batch_size,
                              level, control)
    return _check_exact(verifier, p, q, n, scheme, seed, instances)


def _check_exact(verifier, p, q, n, scheme, seed, instances):
    if p is not None or q is not None:
        laws = [_rows(x, "q").astype(np.float64) for x in _drafts(q, scheme)]
        cases = [(_rows(p, "p").astype(np.float64), laws if scheme == "independent" else laws[0])]
        if cases[0][0].ndim != 1 or len(cases[0][0]) ** n > 1_000_000:
            raise MdsdError("check_verifier enumerates V^n draft tuples: give 1-D p and q with "
                            "V^n at most 10^6")
    else:
        cases = list(_random_instances(instances, n, scheme, seed))
    errors, law_errors, acceptances, alphas = [], [], [], []
    worst = None
    for p_row, q_row in cases:
        p_row = p_row / p_row.sum()
        q_row = ([x / x.sum() for x in q_row] if scheme == "independent"
                 else q_row / q_row.sum())
        output = np.zeros_like(p_row)
        accepted, law_error = 0.0, 0.0
        for drafts, weight in _tuples(q_row, n, scheme):
            law = np.asarray(verifier(p_row, q_row, drafts), dtype=np.float64)
            if law.shape != p_row.shape:
                raise MdsdError(f"the verifier returned shape {law.shape} for drafts {drafts}; "
                                f"expected ({len(p_row)},)")
            law_error = max(law_error, abs(law.sum() - 1.0), float(-min(law.min(), 0.0)))
            output += weight * law
            accepted += weight * law[sorted(set(drafts))].sum()
        error = float(np.abs(output - p_row).max())
        errors.append(error)
        law_errors.append(law_error)
        acceptances.append(accepted)
        alphas.append(alpha_star(p_row, q_row, n, scheme))
        if worst is None or error > worst["error"]:
            worst = {"p": p_row, "q": q_row, "error": error}
    return VerifierReport._exact(errors, law_errors, acceptances, alphas, worst)


def _check_sampled(verifier, p, q, n, scheme, samples, seed, batched, batch_size, level, control):
    if (p is None) != (q is None):
        raise MdsdError("give both p and q, or neither for a random pair")
    if p is None:
        rng = np.random.default_rng(seed)
        p, q = rng.dirichlet(np.full(1000, 0.3)), rng.dirichlet(np.full(1000, 0.3))
    if int(samples) < 1:
        raise MdsdError(f"samples={samples}: expected at least 1")
    p = _law(p, "p")
    if scheme == "independent":
        q = [_law(x, f"q[{i}]") for i, x in enumerate(q)]
    else:
        q = _law(q, "q")
    settings = _settings(p, q, n, scheme, False, None, None, None, None, None, None)
    drafts = _mdsd.sample_drafts(p, _drafts(q, scheme), settings, int(samples), seed)
    outputs = _outputs(verifier, p, q, drafts, batched, batch_size, seed)
    fit = _mdsd.goodness_of_fit(outputs, p, level)
    accepted = int((drafts == outputs[:, None]).any(axis=1).sum())
    fields = {
        "mode": "sampling", "instances": 1, "samples": int(samples), "level": level,
        "lossless": fit["p_value"] >= level, "acceptance": accepted / samples,
        "acceptance_interval": _mdsd.wilson_interval(accepted, int(samples)),
        "alpha_star": alpha_star(p, q, n, scheme), **fit,
    }
    if control:
        moved, control_tv = _moved(p, 1.5 * fit["detectable_tv"])
        control_outputs = _outputs(verifier, moved, q, drafts, batched, batch_size, seed + 1)
        control_p_value = _mdsd.goodness_of_fit(control_outputs, p, level)["p_value"]
        fields.update(control_tv=control_tv, control_p_value=control_p_value,
                      control_detected=control_p_value < level)
    return VerifierReport(**fields)


def _law(x, name):
    """A 1-D float64 law, renormalised."""
    row = _rows(x, name).astype(np.float64)
    if row.ndim != 1:
        raise MdsdError(f"{name} has shape {row.shape}: sampling mode checks one 1-D row")
    return row / row.sum()


def _outputs(verifier, p, q, drafts, batched, batch_size, seed):
    """The verifier's output token for every draft tuple, as int64."""
    rng = np.random.default_rng(seed)
    if batched:
        parts = []
        for start in range(0, len(drafts), batch_size):
            chunk = drafts[start:start + batch_size]
            out = np.asarray(verifier(p, q, chunk, rng))
            if out.shape != (len(chunk),):
                raise MdsdError(f"the batched verifier returned shape {out.shape} for drafts of "
                                f"shape {chunk.shape}; expected ({len(chunk)},)")
            parts.append(out)
        outputs = np.concatenate(parts)
    else:
        outputs = np.asarray([verifier(p, q, tuple(row), rng) for row in drafts.tolist()])
    if outputs.dtype.kind not in "iu":
        raise MdsdError(f"the verifier returned {outputs.dtype} outputs; expected token ids")
    return outputs.astype(np.int64)


def _moved(p, tv):
    """p with mass ``tv`` moved from its lighter tokens to the heaviest ones
    that hold half its mass (in proportion on each side: the least
    detectable law at that distance), and the distance actually moved
    (at most what the light side holds)."""
    order = np.argsort(-p, kind="stable")
    heavy = order[:int(np.searchsorted(np.cumsum(p[order]), 0.5)) + 1]
    mass = float(p[heavy].sum())
    if mass >= 1.0:
        # All mass on the heavy side: spread tv over the vocabulary.
        tv = min(tv, 0.5)
        return (1 - tv) * p + tv / len(p), tv * (1 - mass / len(p))
    tv = min(tv, 1.0 - mass)
    moved = p * (1 - tv / (1.0 - mass))
    moved[heavy] = p[heavy] * (1 + tv / mass)
    return moved / moved.sum(), tv
