import os
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, TypedDict, Union

import numpy as np
import numpy.typing as npt
from typing_extensions import Unpack

ArrayLike = Any  # numpy arrays, CPU tensors (__array__ / __dlpack__), nested lists
Drafts = Union[ArrayLike, Sequence[ArrayLike]]  # a list of rows for scheme="independent"

class MdsdError(ValueError): ...

class FileTransforms(TypedDict, total=False):
    """The transforms of both sides; the draft_ ones replace them on the
    draft's side."""

    temperature: Optional[float]
    top_k: Optional[int]
    top_p: Optional[float]
    draft_temperature: Optional[float]
    draft_top_k: Optional[int]
    draft_top_p: Optional[float]

class Transforms(FileTransforms, total=False):
    """What the rows hold (logits=True: logits) and their transforms."""

    logits: bool

def alpha_star(
    p: ArrayLike, q: Drafts, n: int, scheme: str = "iid", **transforms: Unpack[Transforms]
) -> Union[float, npt.NDArray[np.float64]]: ...
def certificate(
    p: ArrayLike, q: Drafts, n: int, scheme: str = "iid", **transforms: Unpack[Transforms]
) -> npt.NDArray[np.bool_]: ...

class _Verifier:
    @property
    def name(self) -> str: ...
    @property
    def acceptance(self) -> Optional[float]: ...
    def conditional(self, drafts: Sequence[int]) -> npt.NDArray[np.float64]: ...
    def sample(self, drafts: Sequence[int], seed: Optional[int] = None) -> int: ...
    def sample_batch(
        self, drafts: npt.NDArray[np.int64], seed: Optional[int] = None
    ) -> npt.NDArray[np.int64]: ...

class VerifierParams(Transforms, total=False):
    """Transforms, and how a verifier is prepared."""

    truncation: int
    tol: float
    max_sets: int

def Verifier(
    name: str, p: ArrayLike, q: Drafts, n: int, scheme: str = "iid",
    **params: Unpack[VerifierParams],
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
    q: Drafts,
    n: int,
    method: str = "lp",
    scheme: str = "iid",
    *,
    formulation: str = "full",
    max_variables: Optional[int] = None,
    max_sets: Optional[int] = None,
    decomposed: bool = False,
    tol: Optional[float] = None,
    **transforms: Unpack[Transforms],
) -> Solution: ...

class VerifierReport:
    mode: str
    lossless: bool
    acceptance: float
    alpha_star: float
    gap: float
    instances: int
    max_marginal_error: Optional[float]
    max_law_error: Optional[float]
    worst: Optional[dict]
    samples: Optional[int]
    p_value: Optional[float]
    statistic: Optional[float]
    degrees_of_freedom: Optional[int]
    level: Optional[float]
    detectable_tv: Optional[float]
    acceptance_interval: Optional[Tuple[float, float]]
    control_p_value: Optional[float]
    control_tv: Optional[float]
    control_detected: Optional[bool]
    def to_dict(self) -> Dict[str, Any]: ...

def check_verifier(
    verifier: Callable[..., Any],
    p: Optional[ArrayLike] = None,
    q: Optional[Drafts] = None,
    n: int = 2,
    scheme: str = "iid",
    *,
    samples: Optional[int] = None,
    seed: int = 0,
    instances: int = 200,
    batched: bool = False,
    batch_size: int = 8192,
    level: float = 0.01,
    control: bool = True,
) -> VerifierReport: ...

class Evaluation(Dict[str, Any]):
    def to_pandas(self) -> Any: ...

def evaluate(
    p: ArrayLike,
    q: Drafts,
    n: Sequence[int] = (1, 2, 4, 8),
    schemes: Sequence[str] = ("iid", "wor", "greedy", "argmax", "top"),
    verifiers: Sequence[str] = ("specinfer", "optimal-convex"),
    *,
    samples: int = 20_000,
    seed: int = 0,
    **transforms: Unpack[Transforms],
) -> Evaluation: ...
def evaluate_file(
    path: Union[str, "os.PathLike[str]"],
    n: Sequence[int] = (1, 2, 4, 8),
    schemes: Sequence[str] = ("iid", "wor", "greedy", "argmax", "top"),
    verifiers: Sequence[str] = ("specinfer", "optimal-convex"),
    *,
    first_row: int = 0,
    rows: Optional[int] = None,
    samples: int = 20_000,
    seed: int = 0,
    **transforms: Unpack[FileTransforms],
) -> Evaluation: ...

Prefixes = Sequence[Sequence[int]]
BatchedLaws = Callable[[Prefixes], ArrayLike]  # [len(prefixes), V] logits or probabilities

class _CallbackModel:
    @property
    def vocab_size(self) -> int: ...
    @property
    def target_calls(self) -> int: ...
    @property
    def draft_calls(self) -> int: ...
    def laws(self, side: str, prefixes: Prefixes) -> npt.NDArray[np.float64]: ...

def CallbackModel(
    target: BatchedLaws,
    draft: BatchedLaws,
    vocab_size: int,
    *,
    logits: bool = True,
    cache_size: int = 4096,
) -> _CallbackModel: ...

class MarkovLaws:
    def __init__(self, vocab_size: int, order: int, seed: int) -> None: ...
    @property
    def vocab_size(self) -> int: ...
    def target(self, prefixes: Prefixes) -> npt.NDArray[np.float64]: ...
    def draft(self, prefixes: Prefixes) -> npt.NDArray[np.float64]: ...

class MethodFigures:
    name: str
    expected_accepted: float
    standard_error: Optional[float]
    interval_99: Tuple[float, float]
    block_efficiency: float
    tau_law: npt.NDArray[np.float64]
    depth_acceptance: npt.NDArray[np.float64]
    first_token_p_value: Optional[float]
    max_law_error: Optional[float]

class BlockEfficiency:
    exact: bool
    methods: Dict[str, MethodFigures]
    blocks: Optional[int]
    rounds: Optional[int]
    target_calls: int
    draft_calls: int
    @property
    def calls_per_round(self) -> Optional[Tuple[float, float]]: ...

def block_efficiency(
    model: _CallbackModel,
    prompts: Union[Sequence[int], Prefixes],
    depth: int,
    paths: int,
    methods: Sequence[str] = ...,
    *,
    samples: Optional[int] = 10_000,
    seed: int = 0,
    batch: int = 64,
) -> BlockEfficiency: ...
def speculative_decode(
    model: _CallbackModel,
    prompt: Sequence[int],
    max_new_tokens: int,
    *,
    n: int = 2,
    verifier: str = "specinfer",
    scheme: str = "iid",
    seed: int = 0,
    **params: Any,
) -> Dict[str, Any]: ...
