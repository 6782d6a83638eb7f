"""``Verifier``: a built-in verifier prepared for one row of p and q."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from . import _mdsd
from ._mdsd import MdsdError
from ._rows import TRANSFORMS, drafts, rows, settings

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
        given = {"truncation": truncation, "tol": tol, "max_sets": max_sets}
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
        return self._native.conditional(drafts)

    def sample(self, drafts: Sequence[int], seed: Optional[int] = None) -> int:
        """One output token given the drafts."""
        return self._native.sample(drafts, seed)

    def sample_batch(self, drafts: np.ndarray, seed: Optional[int] = None) -> np.ndarray:
        """One output token per row of ``drafts`` (int64 ``[B, n]``)."""
        return self._native.sample_batch(drafts, seed)

    def __repr__(self) -> str:
        acceptance = "None" if self.acceptance is None else f"{self.acceptance:.6f}"
        return (f"Verifier({self.name!r}, scheme={self._scheme!r}, n={self._n}, "
                f"acceptance={acceptance})")


def verifier_settings(name: str) -> list:
    """The settings a built-in verifier's preparation reads, as mdsd's
    registry lists them: ``["truncation"]`` for "khisti", ``["tol"]`` for
    "optimal-convex", ``["max_sets"]`` for "optimal-flow", none for the
    others."""
    return list(_mdsd.verifier_settings(name))
