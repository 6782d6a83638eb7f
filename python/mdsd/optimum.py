"""alpha*, its certificate H*, and one row solved by a chosen method."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from . import _mdsd
from ._rows import TRANSFORMS, checked_keywords, drafts, real, rows, settings
from .results import Solution

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._rows import Transforms


def alpha_star(p: Any, q: Any, n: int, scheme: str = "iid",
               **transforms: Unpack[Transforms]) -> Union[float, np.ndarray]:
    """alpha*, the best acceptance of any lossless verifier with ``n`` drafts.

    ``p`` and ``q`` are rows ``[..., V]`` of probabilities (or logits with
    ``logits=True``): numpy arrays of float16/32/64, CPU tensors, lists.
    Returns a float for one row, else an array of the leading shape
    (``[B, T, V]`` gives ``[B, T]``). ``scheme``: "iid", "wor", "greedy",
    "hub", "argmax", "top", or "independent" with ``q`` a list of arrays,
    one per draft. The transforms (``mdsd.Transforms``: ``temperature``,
    ``top_k``, ``top_p`` of both sides, the ``draft_`` ones replacing them
    on the draft's side) apply before.

    >>> round(mdsd.alpha_star([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], n=2), 12)
    0.86
    """
    checked_keywords("alpha_star", transforms, TRANSFORMS)
    result = _mdsd.alpha_star(rows(p, "p"), drafts(q, scheme),
                              settings(p, q, n, scheme, transforms))
    return float(result) if result.ndim == 0 else result


def certificate(p: Any, q: Any, n: int, scheme: str = "iid",
                **transforms: Unpack[Transforms]) -> np.ndarray:
    """H*, the set that certifies alpha*, as a boolean mask ``[..., V]``:
    alpha* = p(H*) + 1 - Q(all drafts in H*). Arguments as ``alpha_star``.

    >>> mdsd.certificate([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], n=2).tolist()
    [False, True, True]
    """
    checked_keywords("certificate", transforms, TRANSFORMS)
    return _mdsd.certificate(rows(p, "p"), drafts(q, scheme),
                             settings(p, q, n, scheme, transforms))


def solve(p: Any, q: Any, n: int, method: str = "lp", scheme: str = "iid", *,
          formulation: str = "full", max_variables: Optional[int] = None,
          max_sets: Optional[int] = None, decomposed: bool = False,
          max_gap: Optional[float] = None, budget_ms: Optional[float] = None,
          **transforms: Unpack[Transforms]) -> Solution:
    """One row solved by an exact method, ``method="lp"`` (``formulation``
    "full" or "relaxed", ``max_variables``) or ``"flow"`` (``max_sets``,
    ``decomposed``), or by the convex programs (``"convex"``: ``max_gap``,
    the bound on alpha* - acceptance, and ``budget_ms``, the milliseconds
    the solve may take past its start rule, after which it returns the
    rule reached, lossless, with ``status`` "time-limit" and its ``gap``),
    as ``mdsd solve --method`` does (unset settings take its defaults);
    returns a ``Solution``.

    >>> s = mdsd.solve([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2, method="flow")
    >>> round(s.alpha_star, 12), s.certificate.tolist(), s.plan["conditional"].shape
    (0.86, [False, True, True], (6, 3))
    """
    checked_keywords("solve", transforms, TRANSFORMS)
    solver = {"method": method, "formulation": formulation, "max_variables": max_variables,
              "max_sets": max_sets, "decomposed": decomposed,
              "max_gap": real(max_gap, "max_gap"), "budget_ms": real(budget_ms, "budget_ms")}
    p_rows = rows(p, "p")
    fields = _mdsd.solve(p_rows, drafts(q, scheme), settings(p, q, n, scheme, transforms),
                         solver)
    return Solution.of(fields)
