from typing import Any, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

ArrayLike = Any  # numpy arrays, CPU tensors (__array__ / __dlpack__), nested lists

class MdsdError(ValueError): ...

def alpha_star(
    p: ArrayLike,
    q: Union[ArrayLike, Sequence[ArrayLike]],
    n: int,
    scheme: str = "iid",
    *,
    logits: bool = False,
    temperature: Optional[float] = None,
    top_k: Optional[int] = None,
    top_p: Optional[float] = None,
    draft_temperature: Optional[float] = None,
    draft_top_k: Optional[int] = None,
    draft_top_p: Optional[float] = None,
) -> Union[float, npt.NDArray[np.float64]]: ...

def certificate(
    p: ArrayLike,
    q: Union[ArrayLike, Sequence[ArrayLike]],
    n: int,
    scheme: str = "iid",
    *,
    logits: bool = False,
    temperature: Optional[float] = None,
    top_k: Optional[int] = None,
    top_p: Optional[float] = None,
    draft_temperature: Optional[float] = None,
    draft_top_k: Optional[int] = None,
    draft_top_p: Optional[float] = None,
) -> npt.NDArray[np.bool_]: ...
