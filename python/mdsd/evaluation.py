"""``evaluate`` and ``evaluate_file``: what ``mdsd eval`` computes, by the
same library function (``mdsd::evaluation``), on arrays or on a file."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from . import _mdsd
from ._mdsd import MdsdError
from ._rows import (FILE_TRANSFORMS, TRANSFORMS, checked_keywords, drafts, names, rows, settings,
                    whole)
from .results import Evaluation

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._rows import FileTransforms, Transforms

EVAL_SCHEMES = ("iid", "wor", "greedy", "argmax", "top")
EVAL_VERIFIERS = ("specinfer", "optimal-convex")


def _ns(n: Any) -> list:
    """The numbers of drafts: whole numbers of at least 1, one or a list."""
    if not (np.isscalar(n) or hasattr(n, "__iter__")):
        raise TypeError(f"n={n!r}: expected a number of drafts or a list of them")
    values = [n] if np.isscalar(n) else list(n)
    if not values:
        raise MdsdError("n=[]: expected at least one number of drafts")
    return [whole(k, "n", least=1) for k in values]


def evaluate(p: Any, q: Any, n: Sequence[int] = (1, 2, 4, 8),
             schemes: Sequence[str] = EVAL_SCHEMES, verifiers: Sequence[str] = EVAL_VERIFIERS,
             *, samples: int = 20_000, seed: int = 0,
             **transforms: Unpack[Transforms]) -> Evaluation:
    """alpha* of each draft scheme and the acceptance of each verifier at
    each number of drafts ``n``, for every row of ``p`` and ``q`` (``[...,
    V]``, as ``alpha_star`` takes them): what ``mdsd eval`` computes, as an
    ``Evaluation`` of arrays ``[..., len(n)]``. A verifier without a closed
    form is sampled, ``samples`` draws per row and n, row r seeded with
    ``seed + r`` as ``mdsd eval`` seeds it. A verifier is rated on the
    first of iid, wor, greedy, top it supports, or on the scheme named as
    ``"name@scheme"`` (``"optimal-convex@wor"``; its keys keep that name).
    With ``"independent"`` among the schemes or verifiers, ``q`` is a list
    of draft laws taken in turn (draft i from the (i mod m)-th); the other
    schemes draw from the first; independent alpha* is exact where the
    closed form or max flow scales, else the upper end of the convex
    solver's certified interval, as ``mdsd eval`` gives it. A row that
    fails at some stage is listed in ``failures`` and its values there are
    NaN.

    >>> e = mdsd.evaluate([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], n=[1, 2], schemes=["iid"])
    >>> e.alpha_star["iid"].round(6).tolist(), e.acceptance["specinfer"].round(6).tolist()
    ([0.7, 0.86], [0.7, 0.76])
    """
    checked_keywords("evaluate", transforms, TRANSFORMS)
    ns = _ns(n)
    schemes, verifiers = names(schemes, "schemes"), names(verifiers, "verifiers")
    independent = "independent" in schemes or any(v.endswith("@independent") for v in verifiers)
    laws = drafts(q, "independent" if independent else "iid")
    fields = _mdsd.evaluate(rows(p, "p"), laws, settings(p, laws[0], 1, "iid", transforms), ns,
                            schemes, verifiers, whole(samples, "samples", 1),
                            whole(seed, "seed"))
    return Evaluation.of(ns, fields)


def evaluate_file(path: "os.PathLike[str] | str", n: Sequence[int] = (1, 2, 4, 8),
                  schemes: Sequence[str] = EVAL_SCHEMES,
                  verifiers: Sequence[str] = EVAL_VERIFIERS, *, first_row: int = 0,
                  rows: Optional[int] = None, samples: int = 20_000, seed: int = 0,
                  **transforms: Unpack[FileTransforms]) -> Evaluation:
    """``evaluate`` over the rows of a data file, as ``mdsd eval --data``
    reads it (``.npz``, ``.safetensors``, a directory of ``.npy`` files or
    of shards; logits or probabilities as the file says): ``rows`` rows
    from ``first_row`` (all by default), read a window at a time so that
    files larger than memory go through. The arrays are ``[rows, len(n)]``;
    with the same settings the numbers are ``mdsd eval --json``'s per-row
    values.
    """
    checked_keywords("evaluate_file", transforms, FILE_TRANSFORMS)
    ns = _ns(n)
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"path={path!r}: expected a path, got {type(path).__name__}")
    fields = _mdsd.evaluate_file(os.fsdecode(path), settings(None, None, 1, "iid", transforms),
                                 ns, names(schemes, "schemes"), names(verifiers, "verifiers"),
                                 whole(samples, "samples", 1), whole(seed, "seed"),
                                 whole(first_row, "first_row"),
                                 None if rows is None else whole(rows, "rows", 1))
    return Evaluation.of(ns, fields)
