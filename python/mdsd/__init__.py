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

import numpy as np

from ._mdsd import MdsdError
from . import _mdsd

__all__ = [
    "MdsdError", "Solution", "Verifier", "VerifierReport", "alpha_star", "certificate",
    "check_verifier", "solve",
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


def Verifier(name, p, q, n, scheme="iid", *, logits=False, temperature=None, top_k=None,
             top_p=None, draft_temperature=None, draft_top_k=None, draft_top_p=None):
    """A built-in verifier (``"specinfer"``, ``"kseq"``, ``"khisti"``,
    ``"optimal-convex"``, ``"optimal-flow"``, ...) prepared for one row of
    p and q: ``.conditional(drafts)`` the output law over the vocabulary,
    ``.sample(drafts, seed=None)`` one token, ``.sample_batch(drafts,
    seed=None)`` one token per row of an int array ``[B, n]`` (in
    parallel, without the GIL), ``.acceptance`` (closed form or exact
    enumeration; None past its limit) and ``.name``.

    >>> v = mdsd.Verifier("optimal-convex", [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2)
    >>> round(v.acceptance, 6), round(float(v.conditional([2, 2]).sum()), 12)
    (0.86, 1.0)
    """
    settings = _settings(p, q, n, scheme, logits, temperature, top_k, top_p, draft_temperature,
                         draft_top_k, draft_top_p)
    return _mdsd.Verifier(name, _rows(p, "p"), _drafts(q, scheme), settings)


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


class VerifierReport:
    """What ``check_verifier`` found: ``lossless`` (every output marginal is
    p within 1e-9, every conditional a law), ``max_marginal_error``,
    ``max_law_error``, ``acceptance``, ``alpha_star`` and ``gap`` (means over
    the instances), ``instances``, and ``worst`` (the p, q and error of the
    instance furthest from p). ``to_dict()`` gives them as a dict."""

    TOLERANCE = 1e-9

    def __init__(self, errors, law_errors, acceptances, alphas, worst):
        self.instances = len(errors)
        self.max_marginal_error = float(max(errors))
        self.max_law_error = float(max(law_errors))
        self.lossless = self.max_marginal_error <= self.TOLERANCE and self.max_law_error <= self.TOLERANCE
        self.acceptance = float(np.mean(acceptances))
        self.alpha_star = float(np.mean(alphas))
        self.gap = self.alpha_star - self.acceptance
        self.worst = worst

    def to_dict(self):
        return {key: getattr(self, key) for key in (
            "lossless", "max_marginal_error", "max_law_error", "acceptance", "alpha_star", "gap",
            "instances")}

    def __repr__(self):
        verdict = "lossless" if self.lossless else "NOT lossless"
        rows = [("verdict", verdict), ("instances", self.instances),
                ("max |output - p|", f"{self.max_marginal_error:.3e}"),
                ("max law error", f"{self.max_law_error:.3e}"),
                ("acceptance", f"{self.acceptance:.12f}"), ("alpha*", f"{self.alpha_star:.12f}"),
                ("gap to alpha*", f"{self.gap:.3e}")]
        return "\n".join(f"{name:<18}{value}" for name, value in rows)


def _tuples(q, n, scheme):
    """Every ordered draft tuple with its probability: i.i.d. or without
    replacement."""
    import itertools

    if scheme == "iid":
        for drafts in itertools.product(range(len(q)), repeat=n):
            weight = float(np.prod(q[list(drafts)]))
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
        raise MdsdError(f"scheme {scheme!r}: check_verifier enumerates iid and wor drafts")


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
        yield p, q


def check_verifier(verifier, p=None, q=None, n=2, scheme="iid", *, seed=0, instances=200):
    """Whether a verifier preserves the target distribution, by exact
    enumeration: ``verifier(p, q, drafts)`` returns the output law (an array
    over the vocabulary) given the drafts, a tuple of ``n`` token ids.
    Every draft tuple of ``scheme`` ("iid" or "wor") is enumerated, for the
    given ``p``, ``q`` (1-D, small V), or else for ``instances`` random small
    ones drawn from ``seed``; the output marginal is compared with p and the
    acceptance with alpha*. Returns a ``VerifierReport``.

    >>> report = mdsd.check_verifier(
    ...     lambda p, q, drafts: mdsd.Verifier("specinfer", p, q, len(drafts)).conditional(drafts),
    ...     instances=20)
    >>> report.lossless
    True
    """
    if p is not None or q is not None:
        cases = [(_rows(p, "p").astype(np.float64), _rows(q, "q").astype(np.float64))]
        if cases[0][0].ndim != 1 or len(cases[0][0]) ** n > 1_000_000:
            raise MdsdError("check_verifier enumerates V^n draft tuples: give 1-D p and q with "
                            "V^n at most 10^6")
    else:
        cases = list(_random_instances(instances, n, scheme, seed))
    errors, law_errors, acceptances, alphas = [], [], [], []
    worst = None
    for p_row, q_row in cases:
        p_row, q_row = p_row / p_row.sum(), q_row / q_row.sum()
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
    return VerifierReport(errors, law_errors, acceptances, alphas, worst)
