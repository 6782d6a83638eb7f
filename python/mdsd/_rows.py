"""Rows as the caller gives them (numpy arrays, CPU tensors, lists) turned
into the float32 or float64 arrays the native module reads, and the
transform keywords every function takes, declared once here."""

from __future__ import annotations

from typing import Any, Mapping, Optional, TypedDict

import numpy as np

from ._mdsd import MdsdError


class FileTransforms(TypedDict, total=False):
    """The transforms of both sides: ``temperature`` (0 = argmax),
    ``top_k``, ``top_p``; the ``draft_`` ones replace them on the draft's
    side."""

    temperature: Optional[float]
    top_k: Optional[int]
    top_p: Optional[float]
    draft_temperature: Optional[float]
    draft_top_k: Optional[int]
    draft_top_p: Optional[float]


class Transforms(FileTransforms, total=False):
    """What the rows hold (``logits=True``: logits, else probabilities)
    and their transforms."""

    logits: bool


FILE_TRANSFORMS = tuple(FileTransforms.__annotations__)
TRANSFORMS = tuple(Transforms.__annotations__)


def checked_keywords(caller: str, given: Mapping[str, Any], allowed: tuple) -> None:
    """Refuses a keyword not among ``allowed``, as Python refuses an
    unexpected keyword."""
    for key in given:
        if key not in allowed:
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}")


def whole(value: Any, name: str, least: int = 0) -> int:
    """``value`` as an int if it is a whole number of at least ``least``
    (a Python or numpy integer, or a float that is one): a count is never
    truncated (``n=1.5`` is refused, not run as 1), and a wrong type is a
    ``TypeError`` naming the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, np.integer, float, np.floating)):
        raise TypeError(f"{name}={value!r}: expected a whole number, got {type(value).__name__}")
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise MdsdError(f"{name}={value!r}: expected a whole number")
    number = int(value)
    if number < least:
        raise MdsdError(f"{name}={number}: expected at least {least}")
    return number


def stored(*arrays: Any) -> str:
    """The coarsest float type among the caller's rows, before widening:
    it sets how far from 1 a row of probabilities may sum."""
    names = [str(getattr(a, "dtype", "float64")).replace("torch.", "") for a in arrays]
    for coarse in ("float16", "bfloat16", "float32"):
        if coarse in names:
            return coarse
    return "float64"


def rows(x: Any, name: str) -> np.ndarray:
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


def drafts(q: Any, scheme: str) -> list:
    """One draft model's rows, or with independent drafts a list of them."""
    if scheme == "independent":
        return [rows(x, f"q[{i}]") for i, x in enumerate(q)]
    return [rows(q, "q")]


def settings(p: Any, q: Any, n: int, scheme: str, transforms: Mapping[str, Any]) -> dict:
    """What every native call takes besides the rows: n, the scheme, the
    type the rows were stored in and the transforms (unset ones None)."""
    laws = q if scheme == "independent" else [q]
    return {"n": n, "scheme": scheme, "stored": stored(p, *laws),
            "logits": bool(transforms.get("logits", False)),
            **{key: transforms.get(key) for key in FILE_TRANSFORMS}}
