"""Hugging Face causal language models as the batched functions of
:func:`mdsd.CallbackModel`. ``import mdsd.hf`` needs torch and
transformers; ``import mdsd`` does not.

A Qwen2.5 0.5B / 1.5B pair (the draft and target of the shared data)::

    from transformers import AutoModelForCausalLM
    import mdsd, mdsd.hf
    draft = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
    target = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-1.5B")
    model = mdsd.CallbackModel(mdsd.hf.causal_lm_fn(target), mdsd.hf.causal_lm_fn(draft),
                               target.config.vocab_size)
    report = mdsd.block_efficiency(model, prompt_ids, depth=4, paths=2, samples=200)
"""

import copy
import inspect

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    # Raised while handling the first, which Python keeps as its context.
    # No `except ... as name`: mypy would take the name for a module
    # attribute that the module never has at run time.
    raise ImportError("mdsd.hf needs torch and transformers: pip install torch transformers")


def causal_lm_fn(model, *, temperature=1.0, top_k=None, top_p=None, batch_size=32,
                 share_prefix=True):
    """``fn(prefixes) -> [len(prefixes), V]``: the model's next-token
    logits after each prefix (float64 on the host), at ``temperature``
    (0: the argmax alone), with ``top_k`` and then ``top_p`` applied as
    mdsd applies them (tokens outside get -inf). Prefixes run ``batch_size``
    at a time, right-padded (the causal mask keeps padding out of the real
    positions).

    With ``share_prefix`` the tokens every prefix of a batch starts with
    (the prompt, and the drafted tokens the paths share) run once, and
    their key-value cache is repeated across the batch, so that a batch of
    draft-tree nodes costs the prompt once; the cache of the last shared
    tokens is kept between calls, so that a call whose shared tokens
    extend them (the next step of a decoding loop) runs only the new ones.
    Versions of transformers whose cache cannot be repeated that way run
    the whole prefixes instead."""
    device = next(model.parameters()).device
    # The shared tokens of the last call and their cache (batch 1).
    kept = {}

    @torch.no_grad()
    def next_logits(prefixes):
        if any(len(prefix) == 0 for prefix in prefixes):
            raise ValueError("an empty prefix: a causal language model needs at least one "
                             "token before the next (start prompts with the BOS token)")
        model.eval()
        logits = torch.cat([
            _batch_logits(model, prefixes[start:start + batch_size], device, share_prefix, kept)
            for start in range(0, len(prefixes), batch_size)
        ]).double()
        return _transformed(logits, temperature, top_k, top_p).cpu().numpy()

    return next_logits


def _transformed(logits, temperature, top_k, top_p):
    """Temperature, then top-k, then top-p (the smallest most likely set of
    mass at least top_p), as mdsd-core's ``Transform``."""
    masked = torch.full_like(logits, float("-inf"))
    if temperature == 0:
        return masked.scatter(1, logits.argmax(dim=1, keepdim=True), 0.0)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[1]:
        kept = torch.topk(logits, top_k, dim=1).indices
        logits = masked.scatter(1, kept, logits.gather(1, kept))
    if top_p is not None:
        ordered, order = torch.sort(logits, dim=1, descending=True)
        probs = torch.softmax(ordered, dim=1)
        before = torch.cumsum(probs, dim=1) - probs
        ordered = torch.where(before < top_p, ordered, torch.full_like(ordered, float("-inf")))
        logits = torch.full_like(logits, float("-inf")).scatter(1, order, ordered)
    return logits


def _shared_length(prefixes):
    """Tokens every prefix starts with, leaving each at least one of its own
    (whose logits are the answer)."""
    first = prefixes[0]
    shared = min(len(p) for p in prefixes) - 1
    for prefix in prefixes[1:]:
        shared = min(shared, next((i for i, (a, b) in enumerate(zip(first, prefix)) if a != b),
                                  shared))
    return max(shared, 0)


def _right_padded(rows, device):
    lengths = torch.tensor([len(r) for r in rows], device=device)
    ids = torch.zeros((len(rows), int(lengths.max())), dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row, device=device)
        mask[i, :len(row)] = 1
    return ids, mask, lengths


def _batch_logits(model, prefixes, device, share_prefix, kept):
    shared = _shared_length(prefixes) if share_prefix else 0
    if shared > 0:
        try:
            return _logits_after_shared(model, prefixes, shared, device, kept)
        except (AttributeError, TypeError, NotImplementedError):
            # This version's cache has no batch_repeat_interleave: run the
            # whole prefixes.
            kept.clear()
    ids, mask, lengths = _right_padded(prefixes, device)
    logits = model(input_ids=ids, attention_mask=mask).logits
    return logits[torch.arange(len(prefixes), device=device), lengths - 1]


def _shared_cache(model, tokens, device, kept):
    """The key-value cache of ``tokens`` (batch 1): the kept cache of the
    last call's shared tokens extended by the new ones where those are a
    prefix of these, else computed afresh; kept for the next call."""
    tokens = tuple(tokens)
    before = kept.get("tokens", ())
    if before and tokens[:len(before)] == before:
        cache, start = copy.deepcopy(kept["cache"]), len(before)
    else:
        cache, start = None, 0
    if start < len(tokens):
        ids = torch.tensor([tokens[start:]], dtype=torch.long, device=device)
        keyword = _cache_keyword(model)
        output = model(input_ids=ids, use_cache=True, **{keyword: cache})
        cache = getattr(output, keyword)
    kept["tokens"], kept["cache"] = tokens, copy.deepcopy(cache)
    return cache


def _logits_after_shared(model, prefixes, shared, device, kept):
    cache = _shared_cache(model, prefixes[0][:shared], device, kept)
    cache.batch_repeat_interleave(len(prefixes))
    ids, tail_mask, lengths = _right_padded([p[shared:] for p in prefixes], device)
    mask = torch.cat([torch.ones((len(prefixes), shared), dtype=torch.long, device=device),
                      tail_mask], dim=1)
    logits = model(input_ids=ids, attention_mask=mask, **{_cache_keyword(model): cache}).logits
    return logits[torch.arange(len(prefixes), device=device), lengths - 1]


def _cache_keyword(model):
    """The name a model's forward and its output give the key-value cache:
    ``cache`` from transformers 5 on (``past_key_values`` is deprecated
    there), ``past_key_values`` before."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"
