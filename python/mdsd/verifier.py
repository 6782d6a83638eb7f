"""``Verifier``: a built-in verifier prepared for one row of p and q;
``OptimalRules``: the optimal verifier of a batch of rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence

import numpy as np

from . import _mdsd
from ._mdsd import MdsdError
from ._rows import TRANSFORMS, drafts, real, rows, settings, token_ids, whole

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._rows import Transforms


class Verifier:
    """A built-in verifier (``"specinfer"``, ``"kseq"``, ``"khisti"``,
    ``"optimal-convex"``, ``"optimal-flow"``, ...) prepared for one row of
    p and q: ``.conditional(drafts)`` the output law over the vocabulary,
    ``.sample(drafts, seed=None)`` one token, ``.sample_batch(drafts,
    seed=None)`` one token per row of an int array ``[B, n]`` (in
    parallel, without the GIL), ``.acceptance`` (closed form or exact
    enumeration; None past its limit) and ``.name``.

    Besides the transforms, the settings a verifier's preparation reads
    (``mdsd.verifier_settings(name)``): ``truncation`` for "khisti" (pairs
    among that many most likely draft tokens, 1 to 15), ``max_gap`` and
    ``budget_ms`` for "optimal-convex" (the convex solver's bound on
    alpha* - acceptance, and the milliseconds its solve may take past its
    start rule: the rule reached by then, lossless), ``max_sets`` for
    "optimal-flow" (the flow network's budget of draft sets).

    >>> v = mdsd.Verifier("optimal-convex", [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2)
    >>> round(v.acceptance, 6), round(float(v.conditional([2, 2]).sum()), 12)
    (0.86, 1.0)
    """

    def __init__(self, name: str, p: Any, q: Any, n: int, scheme: str = "iid", *,
                 truncation: Optional[int] = None, max_gap: Optional[float] = None,
                 budget_ms: Optional[float] = None, max_sets: Optional[int] = None,
                 **transforms: Unpack[Transforms]) -> None:
        given = {"truncation": None if truncation is None else whole(truncation, "truncation"),
                 "max_gap": real(max_gap, "max_gap"),
                 "budget_ms": real(budget_ms, "budget_ms"),
                 "max_sets": None if max_sets is None else whole(max_sets, "max_sets")}
        reads = verifier_settings(name)
        for key, value in given.items():
            if value is not None and key not in reads:
                takes = f"takes {', '.join(reads)}" if reads else "takes none"
                raise MdsdError(f"Verifier {name!r}: no setting {key!r} ({name} {takes})")
        for key in transforms:
            if key not in TRANSFORMS:
                raise TypeError(f"Verifier() got an unexpected keyword argument {key!r}")
        self._native = _mdsd.Verifier(name, rows(p, "p"), drafts(q, scheme),
                                      settings(p, q, n, scheme, transforms), given)
        self._scheme, self._n = scheme, n

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def acceptance(self) -> Optional[float]:
        """The acceptance on this row: closed form or exact enumeration;
        None past the enumeration's limit."""
        return self._native.acceptance

    def conditional(self, drafts: Sequence[int]) -> np.ndarray:
        """The output law over the vocabulary given the drafts."""
        return self._native.conditional(token_ids(drafts, "drafts"))

    def sample(self, drafts: Sequence[int], seed: Optional[int] = None) -> int:
        """One output token given the drafts."""
        return self._native.sample(token_ids(drafts, "drafts"), seed_of(seed))

    def sample_batch(self, drafts: np.ndarray, seed: Optional[int] = None) -> np.ndarray:
        """One output token per row of ``drafts`` (int64 ``[B, n]``)."""
        return self._native.sample_batch(_token_ids(drafts), seed_of(seed))

    def __repr__(self) -> str:
        acceptance = "None" if self.acceptance is None else f"{self.acceptance:.6f}"
        return (f"Verifier({self.name!r}, scheme={self._scheme!r}, n={self._n}, "
                f"acceptance={acceptance})")


class OptimalRules:
    """The optimal verifier (``"optimal-convex"``) prepared for a batch of
    rows, the shape of a decoding step: ``p`` and ``q`` ``[B, V]``, one row
    per sequence in flight, solved in one call on rayon's pool (without
    the GIL, Ctrl-C watched). ``.sample(drafts, seed=None)`` draws one
    token per row of ``[B, n]`` drafts; ``.alpha_star``, ``.acceptance``
    (each rule's selected-token acceptance, a lower bound of P(output
    among the drafts)), ``.gap`` (alpha_star - acceptance), ``.elapsed_ms``
    (arrays ``[B]``), ``.iterations`` and ``.status`` ("converged" or
    "time-limit") per row. Each row is the ``Verifier("optimal-convex")``
    of that row: ``max_gap`` bounds alpha* - acceptance, ``budget_ms`` the
    milliseconds each row's solve may take past its start rule (the rule
    reached by then: lossless, further from alpha*).

    >>> rules = mdsd.optimal_rules([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]],
    ...                            [[0.2, 0.3, 0.5], [0.2, 0.3, 0.5]], n=2)
    >>> rules.alpha_star.round(6).tolist(), rules.sample([[2, 2], [0, 1]], seed=1).shape
    ([0.86, 0.95], (2,))
    """

    def __init__(self, p: Any, q: Any, n: int, scheme: str = "iid", *,
                 max_gap: Optional[float] = None, budget_ms: Optional[float] = None,
                 **transforms: Unpack[Transforms]) -> None:
        for key in transforms:
            if key not in TRANSFORMS:
                raise TypeError(f"optimal_rules() got an unexpected keyword argument {key!r}")
        given = {"max_gap": real(max_gap, "max_gap"), "budget_ms": real(budget_ms, "budget_ms"),
                 "truncation": None, "max_sets": None}
        self._native = _mdsd.OptimalRules(rows(p, "p"), drafts(q, scheme),
                                          settings(p, q, n, scheme, transforms), given)
        self._scheme, self._n = scheme, n

    def __len__(self) -> int:
        return len(self._native)

    @property
    def alpha_star(self) -> np.ndarray:
        return self._native.alpha_star

    @property
    def acceptance(self) -> np.ndarray:
        return self._native.acceptance

    @property
    def gap(self) -> np.ndarray:
        return self._native.gap

    @property
    def elapsed_ms(self) -> np.ndarray:
        return self._native.elapsed_ms

    @property
    def iterations(self) -> List[int]:
        return self._native.iterations

    @property
    def status(self) -> List[str]:
        return self._native.status

    def sample(self, drafts: Any, seed: Optional[int] = None) -> np.ndarray:
        """One output token per row of ``drafts`` (integer ``[B, n]``)."""
        return self._native.sample(_token_ids(drafts), seed_of(seed))

    def __repr__(self) -> str:
        return (f"OptimalRules(rows={len(self)}, scheme={self._scheme!r}, n={self._n}, "
                f"mean gap={float(np.mean(self.gap)) if len(self) else 0.0:.2e})")


def optimal_rules(p: Any, q: Any, n: int, scheme: str = "iid", *,
                  max_gap: Optional[float] = None, budget_ms: Optional[float] = None,
                  **transforms: Unpack[Transforms]) -> OptimalRules:
    """The optimal verifier of each row of ``p`` and ``q`` ``[B, V]`` in one
    call (:class:`OptimalRules`)."""
    return OptimalRules(p, q, n, scheme, max_gap=max_gap, budget_ms=budget_ms, **transforms)


def seed_of(seed: Any) -> Optional[int]:
    """A seed (a whole number that fits 64 bits), or None for a fresh one."""
    return None if seed is None else whole(seed, "seed")


def _token_ids(drafts: Any) -> np.ndarray:
    """Draft tuples ``[B, n]`` as int64 token ids, from an array of any
    integer dtype; a broadcast view stays one (what it repeats is
    converted, not every row)."""
    array = np.asarray(drafts)
    if array.dtype.kind not in "iu":
        raise TypeError(f"drafts: expected integer token ids, got an array of {array.dtype}")
    if array.ndim != 2:
        raise MdsdError(f"drafts has shape {array.shape}: expected [B, n], one tuple per row")
    if array.dtype == np.int64:
        return array
    if array.size and array.dtype.kind == "u" and int(array.max()) > np.iinfo(np.int64).max:
        raise MdsdError(f"drafts: token {int(array.max())} is out of range of any vocabulary")
    # The entries a broadcast view holds once, converted, then repeated.
    held = array[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in array.strides)]
    return np.broadcast_to(held.astype(np.int64), array.shape)


def verifier_settings(name: str) -> list:
    """The settings a built-in verifier's preparation reads, as mdsd's
    registry lists them: ``["truncation"]`` for "khisti", ``["max_gap", "budget_ms"]`` for
    "optimal-convex", ``["max_sets"]`` for "optimal-flow", none for the
    others."""
    return list(_mdsd.verifier_settings(name))
