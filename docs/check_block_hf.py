"""Hugging Face transformers' speculative sampling (token by token, its
``_speculative_sampling`` in ``transformers.generation.utils``) in the
layout ``mdsd.check_block_verifier`` calls, for ``framework="torch"``:
one block at a time, since the function takes a batch of one. It draws
from torch's global generator, which the checker seeds. ``options`` go to
the function as they are (``assistant_ensemble_weight=0.5``: DIVERSE's
biased ensemble mode, transformers 5)."""

import inspect

import torch
from transformers.generation.utils import _speculative_sampling

# transformers 4 requires `is_done_candidate`; transformers 5 has no such
# argument.
_PARAMETERS = inspect.signature(_speculative_sampling).parameters


def hf_speculative_sampling(target_probs, draft_probs, draft_token_ids, generator, **options):
    """[B, L+1, V], [B, L, V], [B, L] -> [B, L+1] (-1 padded)."""
    if "is_done_candidate" in _PARAMETERS:
        options.setdefault("is_done_candidate", False)
    depth = draft_token_ids.shape[1]
    out = torch.full((len(draft_token_ids), depth + 1), -1, dtype=torch.long)
    for b in range(len(draft_token_ids)):
        # Logits whose softmax is the law: log-probabilities (-inf at 0).
        tokens, _ = _speculative_sampling(
            candidate_input_ids=draft_token_ids[b:b + 1],
            candidate_logits=draft_probs[b:b + 1].log(),
            candidate_length=depth,
            new_logits=target_probs[b:b + 1].log(),
            **options,
        )
        out[b, :tokens.shape[1]] = tokens[0]
    return out
