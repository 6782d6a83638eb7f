"""``check_verifier``: whether a user's verifier preserves the target
distribution, and how far its acceptance is from alpha*, by exact
enumeration of its output law at small V or by sampling with a stated
power at any V."""

import itertools

import numpy as np

from . import _mdsd
from ._mdsd import MdsdError
from . import _rows
from .optimum import alpha_star
from .results import VerifierReport


#: Draft tuples drawn at a time for a verifier called on one tuple at a
#: time (a batched one gets ``batch_size``).
UNBATCHED_DRAFTS = 4096


def _tuples(q, n, scheme):
    """Every ordered draft tuple with its probability: i.i.d., without
    replacement, or one draft from each law of ``q`` (independent)."""
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
    if not callable(verifier):
        raise TypeError(f"verifier={verifier!r}: expected a function")
    n = _rows.whole(n, "n", least=1)
    seed = _rows.whole(seed, "seed")
    scheme = _rows.text(scheme, "scheme")
    if samples is None and scheme not in ENUMERATED_SCHEMES:
        raise MdsdError(f"scheme={scheme!r}: exact mode enumerates the tuples of "
                        f"{', '.join(ENUMERATED_SCHEMES)} drafts (samples=N draws any scheme)")
    if (p is None) != (q is None):
        raise MdsdError("give both p and q, or neither for random ones")
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, float, np.floating)):
        raise TypeError(f"level={level!r}: expected a probability, got {type(level).__name__}")
    if not 0 < level < 1:
        raise MdsdError(f"level={level!r}: expected a probability in (0, 1)")
    if p is not None and scheme == "independent" and (
            not isinstance(q, (list, tuple)) or len(q) != n):
        raise MdsdError(f"independent drafts take q as a list of n = {n} laws, one per draft")
    if samples is not None:
        return _check_sampled(verifier, p, q, n, scheme, samples, seed, batched, batch_size,
                              float(level), control)
    return _check_exact(verifier, p, q, n, scheme, seed, _rows.whole(instances, "instances", 1))


#: The draft schemes whose tuples exact mode enumerates.
ENUMERATED_SCHEMES = ("iid", "wor", "independent")

#: The draft tuples exact mode enumerates at most.
ENUMERATED_TUPLES = 1_000_000


def _check_exact(verifier, p, q, n, scheme, seed, instances):
    if p is not None:
        target = _law(p, "p")
        laws = ([_law(x, f"q[{i}]") for i, x in enumerate(q)] if scheme == "independent"
                else _law(q, "q"))
        if len(target) ** n > ENUMERATED_TUPLES:
            raise MdsdError(f"check_verifier enumerates V^n = {len(target)}^{n} draft tuples, "
                            f"above {ENUMERATED_TUPLES}: a smaller V or n, or samples=N")
        cases = [(target, laws)]
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
            if not np.isfinite(law).all():
                # A NaN would pass every comparison below unnoticed.
                raise MdsdError(f"the verifier returned a law with NaN or infinite entries for "
                                f"drafts {drafts} (p = {p_row.tolist()}): a law is finite")
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
    max_marginal_error, max_law_error = float(max(errors)), float(max(law_errors))
    return VerifierReport(
        mode="exact", instances=len(errors), max_marginal_error=max_marginal_error,
        max_law_error=max_law_error,
        lossless=max(max_marginal_error, max_law_error) <= VerifierReport.TOLERANCE,
        acceptance=float(np.mean(acceptances)), alpha_star=float(np.mean(alphas)), worst=worst)


def _check_sampled(verifier, p, q, n, scheme, samples, seed, batched, batch_size, level, control):
    if p is None:
        rng = np.random.default_rng(seed)
        p, q = rng.dirichlet(np.full(1000, 0.3)), rng.dirichlet(np.full(1000, 0.3))
    samples = _rows.whole(samples, "samples", least=1)
    batch_size = _rows.whole(batch_size, "batch_size", least=1)
    p = _law(p, "p")
    if scheme == "independent":
        q = [_law(x, f"q[{i}]") for i, x in enumerate(q)]
    else:
        q = _law(q, "q")
    laws, settings = _rows.drafts(q, scheme), _rows.settings(p, q, n, scheme, {})
    # The control's target is moved by what the test detects at this
    # sample size, known before any draw, so both run on each batch.
    detectable = _mdsd.detectable_tv(p, samples, level)
    if control:
        moved, control_tv = _moved(p, 1.5 * detectable)
    counts = np.zeros(len(p), dtype=np.int64)
    control_counts = np.zeros(len(p), dtype=np.int64)
    accepted = 0
    rng, control_rng = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    # Batches bound the memory and let Ctrl-C through between them; tuple i
    # is drawn from stream i whatever the batch, so the batches change
    # nothing drawn.
    step = batch_size if batched else UNBATCHED_DRAFTS
    for first in range(0, samples, step):
        drafted = _mdsd.sample_drafts(p, laws, settings, min(step, samples - first), seed, first)
        outputs = _outputs(verifier, p, q, drafted, batched, rng)
        counts += np.bincount(outputs, minlength=len(p))
        accepted += int((drafted == outputs[:, None]).any(axis=1).sum())
        if control:
            control_outputs = _outputs(verifier, moved, q, drafted, batched, control_rng)
            control_counts += np.bincount(control_outputs, minlength=len(p))
    fit = _mdsd.goodness_of_fit(counts, p, level)
    fields = {
        "mode": "sampling", "instances": 1, "samples": samples, "level": level,
        "lossless": fit["p_value"] >= level, "acceptance": accepted / samples,
        "acceptance_interval": _mdsd.wilson_interval(accepted, samples),
        "alpha_star": alpha_star(p, q, n, scheme), **fit,
    }
    if control:
        control_p_value = _mdsd.goodness_of_fit(control_counts, p, level)["p_value"]
        detected = control_p_value < level
        fields.update(control_tv=control_tv, control_p_value=control_p_value,
                      control_detected=detected)
        if not detected:
            # The test could not tell p from a target moved by what it
            # claims to detect: a pass here says nothing.
            fields.update(lossless=None, inconclusive=(
                "the negative control was not detected: the test had no power at this "
                "sample size (more samples), or the verifier does not read its p (an engine "
                "verifier holding the target itself)"))
    return VerifierReport(**fields)


def _law(x, name):
    """A 1-D float64 law, renormalised."""
    row = _rows.rows(x, name).astype(np.float64)
    if row.ndim != 1 or len(row) == 0:
        raise MdsdError(f"{name} has shape {row.shape}: check_verifier checks one 1-D law")
    if not np.isfinite(row).all() or (row < 0).any() or not row.sum() > 0:
        raise MdsdError(f"{name} is not a law: its entries must be finite and non-negative, "
                        f"with a positive sum")
    return row / row.sum()


def _outputs(verifier, p, q, drafts, batched, rng):
    """The verifier's output token for every draft tuple, as int64 token
    ids of p's vocabulary."""
    if batched:
        outputs = np.asarray(verifier(p, q, drafts, rng))
        if outputs.shape != (len(drafts),):
            raise MdsdError(f"the batched verifier returned shape {outputs.shape} for drafts of "
                            f"shape {drafts.shape}; expected ({len(drafts)},)")
    else:
        outputs = np.asarray([verifier(p, q, tuple(row), rng) for row in drafts.tolist()])
    if outputs.dtype.kind not in "iu":
        raise MdsdError(f"the verifier returned {outputs.dtype} outputs; expected token ids")
    outside = (outputs < 0) | (outputs >= len(p))
    if outside.any():
        i = int(np.argmax(outside))
        raise MdsdError(f"the verifier returned token {outputs[i]} for drafts "
                        f"{tuple(drafts[i].tolist())}, outside the vocabulary [0, {len(p)})")
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
