"""Block samplers in vLLM's rejection-sampler layout, written for the
tests of ``check_block_verifier``: correct ones (token-by-token SD, block
verification, SpecInfer over K paths) and broken ones, each a bug seen in
engines' code. ``target`` ``[B, L+1, V]``, ``draft`` ``[B, L, V]``, ``ids``
``[B, L]`` (a path axis after B for K paths); output ``[B, L+1]``, -1
padded."""

import numpy as np


def _sample(rows, rng):
    """One token per row of non-negative weights, renormalised."""
    cumulative = np.cumsum(rows, axis=1)
    u = (1.0 - rng.random(len(rows))) * cumulative[:, -1]
    return np.minimum((cumulative < u[:, None]).sum(axis=1), rows.shape[1] - 1)


def _emit(ids, stop, token):
    """Accepted drafts up to ``stop``, then ``token``, then -1."""
    b, depth = ids.shape
    out = np.full((b, depth + 1), -1, dtype=np.int64)
    positions = np.arange(depth + 1)[None, :]
    out[:, :depth] = np.where(positions[:, :depth] < stop[:, None], ids, -1)
    out[np.arange(b), stop] = token
    return out


def _token_stops(target, draft, ids, rng):
    """Where token-by-token acceptance min(1, p/q) first rejects (L when
    it never does)."""
    b, depth = ids.shape
    p_tok = np.take_along_axis(target[:, :depth], ids[:, :, None], 2)[:, :, 0]
    q_tok = np.take_along_axis(draft, ids[:, :, None], 2)[:, :, 0]
    accepted = rng.random((b, depth)) < np.minimum(1.0, p_tok / q_tok)
    return np.where(accepted.all(axis=1), depth, np.argmin(accepted, axis=1))


def _token_sd(target, draft, ids, rng, residual):
    b, depth = ids.shape
    r = np.arange(b)
    stop = _token_stops(target, draft, ids, rng)
    rejected = stop < depth
    at = np.minimum(stop, depth - 1)
    weights = np.where(rejected[:, None], residual(target[r, at], draft[r, at]),
                       target[r, depth])
    return _emit(ids, stop, _sample(weights, rng))


def token_sd(target, draft, ids, rng):
    """Speculative sampling token by token (Leviathan et al.)."""
    return _token_sd(target, draft, ids, rng, lambda p, q: np.maximum(p - q, 0.0))


def _block_verification(target, draft, ids, rng, *, stop_row=0, tokenwise_residual=False):
    """Sun et al.'s block verification; ``stop_row=-1`` reads S_d from the
    row of x_d (position d - 1) instead of the next token's row d, and
    ``tokenwise_residual`` draws the correction from (p - q)+ instead of
    (w p - q)+: two bugs of engines' ports."""
    b, depth = ids.shape
    r = np.arange(b)
    p_tok = np.take_along_axis(target[:, :depth], ids[:, :, None], 2)[:, :, 0]
    q_tok = np.take_along_axis(draft, ids[:, :, None], 2)[:, :, 0]
    w = np.ones((b, depth + 1))
    for j in range(depth):
        w[:, j + 1] = np.minimum(w[:, j] * p_tok[:, j] / q_tok[:, j], 1.0)
    stop = np.zeros(b, dtype=np.int64)
    undecided = np.ones(b, dtype=bool)
    u = rng.random((b, depth + 1))
    for d in range(depth, 0, -1):
        if d == depth:
            h = w[:, depth]
        else:
            row = d + stop_row
            s = np.maximum(w[:, d, None] * target[:, row] - draft[:, row], 0.0).sum(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                h = np.where(w[:, d] >= 1.0, 1.0, s / (s + 1.0 - w[:, d]))
        now = undecided & (u[:, d] < h)
        stop[now] = d
        undecided &= ~now
    at = np.minimum(stop, depth - 1)
    scale = np.ones(b) if tokenwise_residual else w[r, stop]
    residual = np.maximum(scale[:, None] * target[r, at] - draft[r, at], 0.0)
    empty = residual.sum(axis=1) <= 0
    residual[empty] = target[r, at][empty]
    weights = np.where((stop < depth)[:, None], residual, target[r, depth])
    return _emit(ids, stop, _sample(weights, rng))


def block_verification(target, draft, ids, rng):
    return _block_verification(target, draft, ids, rng)


def specinfer_paths(target, draft, ids, rng):
    """SpecInfer's recursive rejection sampling walked down the tree of K
    i.i.d. paths (``[B, K, ...]``): at a node, the next tokens of the paths
    through it, each accepted with min(1, p/q), p the residual after each
    rejection. With one path the layout has no path axis."""
    if ids.ndim == 2:
        target, draft, ids = target[:, None], draft[:, None], ids[:, None]
    b, k, depth = ids.shape
    out = np.full((b, depth + 1), -1, dtype=np.int64)
    for i in range(b):
        alive = list(range(k))
        d = 0
        while True:
            p = target[i, alive[0], d].copy()
            if d == depth:
                out[i, d] = _sample(p[None, :], rng)[0]
                break
            q = draft[i, alive[0], d]
            chosen = None
            for path in alive:
                x = ids[i, path, d]
                if rng.random() < min(1.0, p[x] / q[x]):
                    chosen = x
                    break
                residual = np.maximum(p - q, 0.0)
                p = residual / residual.sum() if residual.sum() > 0 else p
            if chosen is None:
                out[i, d] = _sample(p[None, :], rng)[0]
                break
            out[i, d] = chosen
            alive = [path for path in alive if ids[i, path, d] == chosen]
            d += 1
    return out


# Broken samplers.

def bv_stop_from_current_row(target, draft, ids, rng):
    """BV reading S_d from x_d's own row: passes on laws="iid"."""
    return _block_verification(target, draft, ids, rng, stop_row=-1)


def bv_tokenwise_residual(target, draft, ids, rng):
    return _block_verification(target, draft, ids, rng, tokenwise_residual=True)


def sd_unnormalised_residual(target, draft, ids, rng):
    """The residual (p - q)+ sampled by inverse CDF as if it summed to 1:
    the draws past its mass fall on the last token."""
    def sample(rows, rng):
        cumulative = np.cumsum(rows, axis=1)
        u = rng.random(len(rows))
        return np.minimum((cumulative < u[:, None]).sum(axis=1), rows.shape[1] - 1)
    b, depth = ids.shape
    r = np.arange(b)
    stop = _token_stops(target, draft, ids, rng)
    at = np.minimum(stop, depth - 1)
    weights = np.where((stop < depth)[:, None],
                       np.maximum(target[r, at] - draft[r, at], 0.0), target[r, depth])
    return _emit(ids, stop, sample(weights, rng))


def sd_bonus_from_last_row(target, draft, ids, rng):
    """Token SD that always emits its last token from the bonus row L,
    after a rejection too."""
    depth = ids.shape[1]
    return _emit(ids, _token_stops(target, draft, ids, rng), _sample(target[:, depth], rng))


def tree_greedy(target, draft, ids, rng):
    """A tree sampler that accepts only the target's most likely child
    (greedy verification) at temperature > 0."""
    b, k, depth = ids.shape
    out = np.full((b, depth + 1), -1, dtype=np.int64)
    for i in range(b):
        alive = list(range(k))
        for d in range(depth + 1):
            best = int(np.argmax(target[i, alive[0], d]))
            out[i, d] = best
            if d == depth or best not in ids[i, alive, d]:
                break
            alive = [path for path in alive if ids[i, path, d] == best]
    return out
