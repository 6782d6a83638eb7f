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


#: The largest count, seed or id the native module takes (an unsigned
#: 64-bit integer).
MOST = 2**64 - 1


def whole(value: Any, name: str, least: int = 0, most: int = MOST) -> int:
    """``value`` as an int if it is a whole number from ``least`` to
    ``most`` (a Python or numpy integer, or a float that is one): a count
    is never truncated (``n=1.5`` is refused, not run as 1), and a wrong
    type is a ``TypeError`` naming the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, np.integer, float, np.floating)):
        raise TypeError(f"{name}={value!r}: expected a whole number, got {type(value).__name__}")
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise MdsdError(f"{name}={value!r}: expected a whole number")
    number = int(value)
    if number < least:
        raise MdsdError(f"{name}={number}: expected at least {least}")
    if number > most:
        raise MdsdError(f"{name}={number}: expected at most {most}")
    return number


def real(value: Any, name: str) -> Optional[float]:
    """``value`` as a float if it is a real number (None stays None): a
    wrong type is a ``TypeError`` naming the argument."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}={value!r}: expected a real number, got {type(value).__name__}")
    return float(value)


def flag(value: Any, name: str) -> bool:
    """``value`` if it is a boolean: ``logits="no"`` is not true."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}={value!r}: expected True or False, got {type(value).__name__}")
    return bool(value)


def text(value: Any, name: str) -> str:
    """``value`` if it is a string (a name: a scheme, a method)."""
    if not isinstance(value, str):
        raise TypeError(f"{name}={value!r}: expected a name, got {type(value).__name__}")
    return value


def names(value: Any, name: str) -> list:
    """One name or a list of them (schemes, verifiers, methods)."""
    if isinstance(value, str):
        return [value]
    if not hasattr(value, "__iter__"):
        raise TypeError(f"{name}={value!r}: expected a name or a list of names")
    return [text(v, name) for v in value]


def token_ids(ids: Any, name: str) -> list:
    """A list of token ids (whole numbers, at least 0)."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"{name}={ids!r}: expected a list of token ids")
    return [whole(t, f"{name}[{i}]") for i, t in enumerate(ids)]


def token_array(output: Any, name: str) -> np.ndarray:
    """Token ids from numpy, torch tensors or lists, as int64 (floats that
    hold whole numbers too)."""
    if hasattr(output, "detach"):
        output = output.detach().to("cpu").numpy()
    array = np.asarray(output)
    if array.dtype.kind not in "iu":
        whole_floats = (array.dtype.kind == "f" and bool(np.isfinite(array).all())
                        and bool((array == np.round(array)).all()))
        if not whole_floats:
            raise MdsdError(f"{name} has dtype {array.dtype}: expected token ids (integers)")
    return array.astype(np.int64)


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
    except ValueError as e:
        raise MdsdError(f"{name} is not a rectangular array of numbers: {e}") from None
    if array.dtype.kind not in "fiu":
        # Complex values would lose their imaginary part, booleans and
        # objects are not numbers of a law.
        raise TypeError(f"{name}: expected real numbers, got an array of {array.dtype}")
    if array.dtype == np.float16:
        array = array.astype(np.float32)
    elif array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
    return array


def drafts(q: Any, scheme: str) -> list:
    """One draft model's rows, or with independent drafts a list of them."""
    if scheme == "independent":
        if not isinstance(q, (list, tuple)):
            raise TypeError(f"independent drafts take q as a list of laws, one per draft; got "
                            f"{type(q).__name__}")
        return [rows(x, f"q[{i}]") for i, x in enumerate(q)]
    return [rows(q, "q")]


def settings(p: Any, q: Any, n: int, scheme: str, transforms: Mapping[str, Any]) -> dict:
    """What every native call takes besides the rows: n, the scheme, the
    type the rows were stored in and the transforms (unset ones None)."""
    laws = q if scheme == "independent" else [q]
    return {"n": whole(n, "n", least=1), "scheme": text(scheme, "scheme"),
            "stored": stored(p, *laws), "logits": flag(transforms.get("logits", False), "logits"),
            **{key: transform(key, transforms.get(key)) for key in FILE_TRANSFORMS}}


def transform(key: str, value: Any) -> Any:
    """A transform's value checked for its type: top-k a whole number,
    the others real numbers; None where unset."""
    if value is None:
        return None
    return whole(value, key) if key.endswith("top_k") else real(value, key)
