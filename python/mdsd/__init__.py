"""mdsd: the optimal acceptance of multi-draft speculative sampling.

A target model p and a draft model q propose next-token laws; a draft
scheme draws n draft tokens from q; a lossless verifier outputs one token
distributed exactly as p. ``alpha_star`` is the best acceptance any
lossless verifier can reach, ``certificate`` the set H* that proves it
(alpha* = p(H*) + 1 - Q(all drafts in H*)).

>>> import numpy as np, mdsd
>>> round(mdsd.alpha_star([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], n=2), 12)
0.86

The modules: ``optimum`` (alpha*, H*, ``solve``), ``evaluation``
(``evaluate``, what ``mdsd eval`` computes), ``verifier`` (the built-in
verifiers; ``optimal_rules`` for a batch of rows), ``check`` (``check_verifier``, for your own), ``block_check``
(``check_block_verifier`` for an engine's block sampler,
``audit_first_tokens`` for its logs, ``samples_needed``), ``live`` (model
pairs behind callbacks, blocks, speculative decoding), ``results`` (the
frozen dataclasses every call returns); ``Transforms`` is the one set of
transform keywords every function takes.
"""

from ._mdsd import MarkovLaws, MdsdError
from ._rows import FileTransforms, Transforms
from .block_check import audit_first_tokens, check_block_verifier, samples_needed
from .check import check_verifier
from .evaluation import evaluate, evaluate_file
from .live import CallbackModel, block_efficiency, speculative_decode
from .optimum import alpha_star, certificate, solve
from .results import (BlockEfficiency, BlockVerifierReport, Evaluation, Failure,
                      FirstTokenAudit, MethodFigures, Solution, VerifierReport)
from .verifier import OptimalRules, Verifier, optimal_rules, verifier_settings

__all__ = [
    "BlockEfficiency", "BlockVerifierReport", "CallbackModel", "Evaluation", "Failure",
    "FileTransforms", "FirstTokenAudit", "MarkovLaws", "MdsdError", "MethodFigures",
    "OptimalRules", "Solution",
    "Transforms", "Verifier", "VerifierReport", "alpha_star", "audit_first_tokens",
    "block_efficiency", "certificate", "check_block_verifier", "check_verifier", "evaluate",
    "evaluate_file", "optimal_rules", "samples_needed", "solve", "speculative_decode",
    "verifier_settings",
]
