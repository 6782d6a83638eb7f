"""The results mdsd returns, one convention for all: frozen dataclasses,
built here from what the native module hands back, each with a readable
``repr`` and ``to_dict()``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, cast

import numpy as np

# The two-sided 99% normal quantile (mdsd_verify::Z_99).
Z_99 = 2.5758293035489004


class _Result:
    def to_dict(self) -> Dict[str, Any]:
        """The fields as a dict (nested results as dicts)."""
        return dataclasses.asdict(cast(Any, self))


@dataclass(frozen=True)
class Solution(_Result):
    """What ``solve`` found: ``alpha_star``, ``acceptance`` (what the
    method's verifier reaches), ``gap`` (alpha_star - acceptance: how far
    that verifier is from the optimum), ``certificate`` (H* as a bool
    mask), ``status`` ("optimal", "converged", "time-limit",
    "certificate-unverified"),
    ``iterations``, ``elapsed_ms``, and for lp and flow ``plan``: a dict of
    ``drafts`` (the draft tuples or sets), ``probs`` (their probability)
    and ``conditional`` (the output law given each, ``[outcomes, V]``), the
    keys of ``mdsd solve --plan``'s JSON."""

    alpha_star: float
    acceptance: float
    gap: float
    certificate: np.ndarray
    status: str
    iterations: int
    elapsed_ms: float
    plan: Optional[Dict[str, Any]] = None

    @classmethod
    def of(cls, fields: Dict[str, Any]) -> "Solution":
        return cls(alpha_star=fields["alpha_star"], acceptance=fields["acceptance"],
                   gap=fields["gap"], certificate=fields["certificate"], status=fields["status"],
                   iterations=fields["iterations"], elapsed_ms=fields["elapsed_ms"],
                   plan=fields.get("plan"))

    def __repr__(self) -> str:
        return (f"Solution(alpha_star={self.alpha_star!r}, acceptance={self.acceptance!r}, "
                f"status={self.status!r}, |H*|={int(self.certificate.sum())})")


@dataclass(frozen=True)
class Failure(_Result):
    """A row that failed at some stage of an evaluation, and why."""

    row: int
    stage: str
    error: str


@dataclass(frozen=True)
class Evaluation(_Result):
    """What ``evaluate`` and ``evaluate_file`` compute, as ``mdsd eval``
    does, each array of the rows' leading shape and ``len(n)``: ``n`` (the
    numbers of drafts), ``alpha_star`` (scheme -> alpha*), ``acceptance``
    (verifier, by the name given -> its acceptance on its scheme
    ``rated_scheme[verifier]``, exact where a closed form gives it, else
    sampled), ``interval_99`` (verifier -> the (low, high) Wilson 99%
    interval of each sampled acceptance; NaN where exact), ``failures``
    (a :class:`Failure` per row that failed, whose values there are NaN).
    ``to_pandas()`` gives one row per position and n (pandas is not a
    dependency)."""

    n: np.ndarray
    alpha_star: Dict[str, np.ndarray]
    acceptance: Dict[str, np.ndarray]
    interval_99: Dict[str, Tuple[np.ndarray, np.ndarray]]
    rated_scheme: Dict[str, str]
    failures: Tuple[Failure, ...]

    @classmethod
    def of(cls, ns: Any, fields: Dict[str, Any]) -> "Evaluation":
        verifiers = [key.split("/", 1)[1] for key in fields if key.startswith("acceptance/")]
        return cls(
            n=np.array(ns),
            alpha_star={key.split("/", 1)[1]: value for key, value in fields.items()
                        if key.startswith("alpha_star/")},
            acceptance={name: fields[f"acceptance/{name}"] for name in verifiers},
            interval_99={name: (fields[f"acceptance_low/{name}"],
                                fields[f"acceptance_high/{name}"]) for name in verifiers},
            rated_scheme={name: fields[f"scheme/{name}"] for name in verifiers},
            failures=tuple(Failure(*f) for f in fields["failures"]),
        )

    def to_pandas(self) -> Any:
        """One row per position and n: ``row``, ``n``, ``alpha_star/<scheme>``
        and ``acceptance/<verifier>`` columns."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Evaluation.to_pandas needs pandas (pip install pandas); "
                              "mdsd itself does not") from None
        arrays = {f"alpha_star/{k}": v for k, v in self.alpha_star.items()}
        arrays.update({f"acceptance/{k}": v for k, v in self.acceptance.items()})
        rows = int(np.prod(next(iter(arrays.values())).shape[:-1])) if arrays else 0
        frame = {"row": np.repeat(np.arange(rows), len(self.n)), "n": np.tile(self.n, rows)}
        frame.update({key: value.reshape(-1) for key, value in arrays.items()})
        return pd.DataFrame(frame)

    def __repr__(self) -> str:
        rows = next(iter(self.alpha_star.values()), np.zeros((0, 0))).shape[:-1]
        lines = [f"Evaluation of {rows} rows at n = {self.n.tolist()}"]
        for name, values in self.alpha_star.items():
            means = np.nanmean(values.reshape(-1, len(self.n)), axis=0)
            lines.append(f"  alpha* {name:<24}" + " ".join(f"{m:.6f}" for m in means))
        for name, values in self.acceptance.items():
            means = np.nanmean(values.reshape(-1, len(self.n)), axis=0)
            lines.append(f"  {name:<31}" + " ".join(f"{m:.6f}" for m in means))
        if self.failures:
            lines.append(f"  {len(self.failures)} row(s) failed: {self.failures[0]}")
        return "\n".join(lines)


@dataclass(frozen=True)
class VerifierReport(_Result):
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
    no power, or the verifier does not read its p; ``lossless`` is then
    None, inconclusive, and ``inconclusive`` says why). Fields of the other
    mode are None."""

    mode: str
    lossless: Optional[bool]
    acceptance: float
    alpha_star: float
    instances: int
    max_marginal_error: Optional[float] = None
    max_law_error: Optional[float] = None
    worst: Optional[Dict[str, Any]] = None
    samples: Optional[int] = None
    p_value: Optional[float] = None
    statistic: Optional[float] = None
    degrees_of_freedom: Optional[int] = None
    level: Optional[float] = None
    detectable_tv: Optional[float] = None
    acceptance_interval: Optional[Tuple[float, float]] = None
    control_p_value: Optional[float] = None
    control_tv: Optional[float] = None
    control_detected: Optional[bool] = None
    inconclusive: Optional[str] = None

    # How far from p an exact verifier's output may be and still be lossless.
    TOLERANCE = 1e-9

    @property
    def gap(self) -> float:
        """alpha* - acceptance."""
        return self.alpha_star - self.acceptance

    def __repr__(self) -> str:
        if self.lossless is None:
            verdict = f"inconclusive: {self.inconclusive}"
        else:
            verdict = "lossless" if self.lossless else "NOT lossless"
        rows: List[Tuple[str, Any]] = [("verdict", verdict)]
        if self.mode == "exact":
            rows += [("instances", self.instances),
                     ("max |output - p|", f"{self.max_marginal_error:.3e}"),
                     ("max law error", f"{self.max_law_error:.3e}"),
                     ("acceptance", f"{self.acceptance:.12f}")]
        else:
            low, high = self.acceptance_interval or (float("nan"), float("nan"))
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


@dataclass(frozen=True)
class MethodFigures(_Result):
    """One block method's figures: ``expected_accepted`` (E[tau]) with its
    ``interval_99`` (sampled; exact mode gives the value twice),
    ``standard_error`` (sampled), ``block_efficiency`` (E[tau] + 1, tokens
    per target call), ``tau_law`` (P(tau = d), d = 0..L),
    ``depth_acceptance`` (P(tau >= d | tau >= d - 1), d = 1..L), and
    ``first_token_p_value`` (sampled: the chi-square test of the first
    output token against the target's law after the first prompt) or
    ``max_law_error`` (exact: the largest error of the output law of whole
    blocks)."""

    name: str
    expected_accepted: float
    standard_error: Optional[float]
    interval_99: Tuple[float, float]
    block_efficiency: float
    tau_law: np.ndarray
    depth_acceptance: np.ndarray
    first_token_p_value: Optional[float]
    max_law_error: Optional[float]

    @classmethod
    def of(cls, name: str, figures: Dict[str, Any]) -> "MethodFigures":
        error = figures["standard_error"]
        half = 0.0 if error is None else Z_99 * error
        mean = figures["expected_accepted"]
        return cls(name=name, expected_accepted=mean, standard_error=error,
                   interval_99=(mean - half, mean + half),
                   block_efficiency=figures["block_efficiency"],
                   tau_law=np.asarray(figures["tau_law"]),
                   depth_acceptance=np.asarray(figures["depth_acceptance"]),
                   first_token_p_value=figures["first_token_p_value"],
                   max_law_error=figures["max_law_error"])

    def __repr__(self) -> str:
        return (f"MethodFigures({self.name!r}, E[tau]={self.expected_accepted:.4f} "
                f"[{self.interval_99[0]:.4f}, {self.interval_99[1]:.4f}])")


@dataclass(frozen=True)
class BlockEfficiency(_Result):
    """What ``block_efficiency`` measured: ``methods`` (name ->
    :class:`MethodFigures`), ``exact``, ``blocks`` and ``rounds`` (sampled
    mode), ``target_calls`` and ``draft_calls`` (calls that reached the
    model's functions during the run) and ``calls_per_round``."""

    methods: Dict[str, MethodFigures]
    exact: bool
    blocks: Optional[int]
    rounds: Optional[int]
    target_calls: int
    draft_calls: int

    @classmethod
    def of(cls, result: Dict[str, Any], exact: bool) -> "BlockEfficiency":
        return cls(methods={name: MethodFigures.of(name, figures)
                            for name, figures in result["methods"].items()},
                   exact=exact, blocks=result.get("blocks"), rounds=result.get("rounds"),
                   target_calls=result["target_calls"], draft_calls=result["draft_calls"])

    @property
    def calls_per_round(self) -> Optional[Tuple[float, float]]:
        """(target, draft) calls per round of blocks (sampled mode)."""
        if not self.rounds:
            return None
        return self.target_calls / self.rounds, self.draft_calls / self.rounds

    def __repr__(self) -> str:
        mode = "exact" if self.exact else f"{self.blocks} blocks"
        lines = [f"block efficiency ({mode}; {self.target_calls} target and "
                 f"{self.draft_calls} draft calls)",
                 f"{'method':<16}{'E[tau]':>10}{'99% interval':>24}{'tokens/call':>13}"]
        for m in self.methods.values():
            interval = f"[{m.interval_99[0]:.4f}, {m.interval_99[1]:.4f}]"
            lines.append(f"{m.name:<16}{m.expected_accepted:>10.4f}{interval:>24}"
                         f"{m.block_efficiency:>13.4f}")
        return "\n".join(lines)


@dataclass(frozen=True)
class BlockVerifierReport(_Result):
    """What ``check_block_verifier`` found.

    ``lossless``: True, False, or None (inconclusive: the negative control
    was not detected); ``reasons`` says why it is not True. ``mode``
    ("sampling" or "exact"), ``depth``, ``paths``, ``vocab_size``,
    ``laws``. Sampling mode: ``samples``, ``p_value`` (Pearson's chi-square
    of the completed blocks over the V^(L+1) sequences, ``statistic`` over
    ``degrees_of_freedom``), ``first_token_p_value``, ``detectable_tv`` (the
    smallest total variation of the law of sequences the test detects with
    99% power: what a pass rules out), ``control_tv``, ``control_p_value``
    and ``control_detected`` (the same drafts against a target moved that
    far), ``worst`` (the sequences furthest from their expected counts).
    Exact mode: ``max_law_error`` (lossless within 1e-9). Both:
    ``expected_accepted`` (E[tau]) with ``interval_99`` (sampled),
    ``tau_law`` (P(tau = d)), ``reference`` (exact E[tau] of ``token`` and
    ``bv`` on the same laws, and the block ``optimum`` with its
    ``optimum_kind``), ``degenerate`` (E[tau] = 0: nothing was ever
    accepted)."""

    mode: str
    lossless: Optional[bool]
    depth: int
    paths: int
    vocab_size: int
    laws: str
    expected_accepted: float
    tau_law: List[float]
    reference: Dict[str, Any]
    degenerate: bool
    reasons: List[str]
    samples: Optional[int] = None
    level: Optional[float] = None
    p_value: Optional[float] = None
    statistic: Optional[float] = None
    degrees_of_freedom: Optional[int] = None
    first_token_p_value: Optional[float] = None
    detectable_tv: Optional[float] = None
    interval_99: Optional[Tuple[float, float]] = None
    control_tv: Optional[float] = None
    control_p_value: Optional[float] = None
    control_detected: Optional[bool] = None
    worst: Optional[List[Dict[str, Any]]] = None
    max_law_error: Optional[float] = None

    # How far from p an enumerated output law may be and still be lossless.
    TOLERANCE = 1e-9

    def __repr__(self) -> str:
        if self.lossless is None:
            verdict = "inconclusive"
        else:
            verdict = "lossless" if self.lossless else "NOT lossless"
        shape = f"L = {self.depth}, K = {self.paths}, V = {self.vocab_size}, {self.laws} laws"
        rows: List[Tuple[str, Any]] = [("verdict", verdict), ("blocks", shape)]
        rows += [("why", reason) for reason in self.reasons]
        if self.mode == "exact":
            rows.append(("max law error", f"{self.max_law_error:.3e} (exact)"))
            rows.append(("E[tau]", f"{self.expected_accepted:.6f} (exact)"))
        else:
            low, high = self.interval_99 or (float("nan"), float("nan"))
            rows += [("samples", self.samples),
                     ("chi2 p-value", f"{self.p_value:.3e} (level {self.level}, "
                                      f"{self.degrees_of_freedom} degrees of freedom)"),
                     ("first token", f"p-value {self.first_token_p_value:.3e}"),
                     ("detectable TV", f"{self.detectable_tv:.3e} (99% power)"),
                     ("E[tau]", f"{self.expected_accepted:.4f} [{low:.4f}, {high:.4f}] 99%")]
            if self.control_detected is not None:
                rows.append(("negative control",
                             f"target moved {self.control_tv:.2e}: p-value "
                             f"{self.control_p_value:.3e}, "
                             + ("detected" if self.control_detected else "NOT detected")))
        ref = self.reference
        rows.append(("reference E[tau]", f"token {ref['token']:.4f}, bv {ref['bv']:.4f}"
                     + ("" if ref.get("optimum") is None else
                        f", optimum {ref['optimum']:.4f} ({ref['optimum_kind']})")))
        rows.append(("P(tau = d)", " ".join(f"{x:.4f}" for x in self.tau_law)))
        if self.degenerate:
            rows.append(("degenerate", "E[tau] = 0: no draft token was ever accepted"))
        if self.worst and self.lossless is False:
            w = self.worst[0]
            rows.append(("worst sequence", f"{w['sequence']}: expected {w['expected']:.1f}, "
                                           f"observed {w['observed']}"))
        return "\n".join(f"{name:<18}{value}" for name, value in rows)


@dataclass(frozen=True)
class FirstTokenAudit(_Result):
    """What ``audit_first_tokens`` found in a log of engine steps:
    ``lossless`` (True, False, or None when the test has no power),
    ``reason``, ``steps``, ``tokens`` audited (one a step, or every emitted
    token), ``bins`` of the probability integral transform, ``p_value``
    (the smaller of ``p_values`` times their number: Bonferroni),
    ``p_values`` (chi-square of the bins against uniform, one per order of
    the vocabulary: ``"token_id"``, ``"probability"``), ``level``,
    ``detectable_tv`` (the smallest total variation of a binned transform
    detected with 99% power)."""

    lossless: Optional[bool]
    steps: int
    tokens: int
    bins: int
    p_value: float
    p_values: Dict[str, float]
    detectable_tv: float
    level: float
    reason: Optional[str]

    def __repr__(self) -> str:
        verdict = {True: "lossless", False: "NOT lossless", None: "inconclusive"}[self.lossless]
        lines = [f"verdict           {verdict}"]
        if self.reason:
            lines.append(f"why               {self.reason}")
        lines += [f"steps             {self.steps} ({self.tokens} tokens audited, "
                  f"{self.bins} bins)",
                  f"chi2 p-value      {self.p_value:.3e} (level {self.level}; "
                  + ", ".join(f"{order} order {p:.3e}" for order, p in self.p_values.items())
                  + ")",
                  f"detectable TV     {self.detectable_tv:.3e} (99% power)"]
        return "\n".join(lines)
