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

class _Verifier:
    @property
    def name(self) -> str: ...
    @property
    def acceptance(self) -> Optional[float]: ...
    def conditional(self, drafts: Sequence[int]) -> npt.NDArray[np.float64]: ...
    def sample(self, drafts: Sequence[int], seed: Optional[int] = None) -> int: ...
    def sample_batch(self, drafts: npt.NDArray[np.int64], seed: Optional[int] = None) -> npt.NDArray[np.int64]: ...

def Verifier(
    name: str,
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
) -> _Verifier: ...

class Solution:
    alpha_star: float
    acceptance: float
    certificate: npt.NDArray[np.bool_]
    status: str
    iterations: int
    elapsed_ms: float
    plan: Optional[dict]

def solve(
    p: ArrayLike,
    q: Union[ArrayLike, Sequence[ArrayLike]],
    n: int,
    method: str = "lp",
    scheme: str = "iid",
    *,
    logits: bool = False,
    temperature: Optional[float] = None,
    top_k: Optional[int] = None,
    top_p: Optional[float] = None,
    draft_temperature: Optional[float] = None,
    draft_top_k: Optional[int] = None,
    draft_top_p: Optional[float] = None,
    formulation: str = "full",
    max_variables: Optional[int] = None,
    max_sets: Optional[int] = None,
    decomposed: bool = False,
    tol: Optional[float] = None,
) -> Solution: ...

class VerifierReport:
    lossless: bool
    max_marginal_error: float
    max_law_error: float
    acceptance: float
    alpha_star: float
    gap: float
    instances: int
    worst: dict
    def to_dict(self) -> dict: ...

def check_verifier(
    verifier: Any,
    p: Optional[ArrayLike] = None,
    q: Optional[ArrayLike] = None,
    n: int = 2,
    scheme: str = "iid",
    *,
    seed: int = 0,
    instances: int = 200,
) -> VerifierReport: ...
