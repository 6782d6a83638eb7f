"""``Verifier``: a built-in verifier prepared for one row of p and q."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

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
    among that many most likely draft tokens, 1 to 15), ``tol`` for
    "optimal-convex" (the convex solver's tolerance), ``max_sets`` for
    "optimal-flow" (the flow network's budget of draft sets).

    >>> v = mdsd.Verifier("optimal-convex", [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2)
    >>> round(v.acceptance, 6), round(float(v.conditional([2, 2]).sum()), 12)
    (0.86, 1.0)
    """

    def __init__(self, name: str, p: Any, q: Any, n: int, scheme: str = "iid", *,
                 truncation: Optional[int] = None, tol: Optional[float] = None,
                 max_sets: Optional[int] = None, **transforms: Unpack[Transforms]) -> None:
        given = {"truncation": None if truncation is None else whole(truncation, "truncation"),
                 "tol": real(tol, "tol"),
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
    registry lists them: ``["truncation"]`` for "khisti", ``["tol"]`` for
    "optimal-convex", ``["max_sets"]`` for "optimal-flow", none for the
    others."""
    return list(_mdsd.verifier_settings(name))
