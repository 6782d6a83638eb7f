"""``check_block_verifier``: an engine's own block sampler checked as a
black box, in its own tensor layout; ``audit_first_tokens``: logged engine
steps checked at full vocabulary; ``samples_needed``: the power
calculator. The statistics (chi-square with pooling, the detectable total
variation, the exact block references) come from the library."""

import numpy as np

from . import _mdsd, _rows
from ._mdsd import MarkovLaws, MdsdError, TabledLaws
from .check import _moved
from .live import CallbackModel, block_efficiency
from .results import Z_99, BlockVerifierReport, FirstTokenAudit

#: Cells of the law of completed blocks (V^(L+1) sequences) the test
#: counts at most, and prefixes of up to L tokens whose laws are tabled.
SEQUENCE_LIMIT = _mdsd.SEQUENCE_LIMIT

#: Bytes of the sampler's float64 arrays held at once (a batch's, or exact
#: mode's every block).
ARRAY_BYTES_LIMIT = 1 << 30

#: Draft blocks exact mode enumerates at most.
EXACT_BLOCK_LIMIT = 200_000

#: Context length of the built-in Markov laws.
MARKOV_ORDER = 2

#: The kinds of rows the built-in laws mix, where samplers tend to break,
#: with their frequencies (the first context, the root, is never
#: disjoint: a block that can accept nothing checks little).
ROW_KINDS = ("flat", "peaked", "zeros", "equal", "disjoint")
ROW_KIND_WEIGHTS = (0.35, 0.25, 0.2, 0.1, 0.1)

#: Bins of the probability integral transform in ``audit_first_tokens``
#: (fewer when there are fewer than 10 steps a bin).
PIT_BINS = 100

#: The orders of the vocabulary in which ``audit_first_tokens`` takes the
#: probability integral transform: token ids, and the row's probabilities
#: from the most likely token down.
PIT_ORDERS = ("token_id", "probability")


class _Laws:
    """p and q after every prefix of up to L tokens, tabled as rows
    ``[C, V]``: the prefixes of length d at ``offsets[d]`` + their tokens
    read in base V; ``native``, the same tables in Rust, draws the draft
    blocks, gathers the sampler's arrays, reads and completes its
    outputs."""

    def __init__(self, target, draft, vocab_size, depth, source):
        self.target, self.draft = target, draft
        self.vocab_size, self.depth, self.source = vocab_size, depth, source
        self.offsets = np.cumsum([0] + [vocab_size ** d for d in range(depth + 1)])
        self.native = TabledLaws(np.ascontiguousarray(target, dtype=np.float64),
                                 np.ascontiguousarray(draft, dtype=np.float64), vocab_size, depth)

    @classmethod
    def prefixes(cls, vocab_size, depth):
        """Every prefix of up to ``depth`` tokens, in table order."""
        out = [[]]
        level = [[]]
        for _ in range(depth):
            level = [prefix + [y] for prefix in level for y in range(vocab_size)]
            out += level
        return out

    def child(self, index, length, tokens):
        """The table index of each prefix ``index`` (of ``length`` tokens)
        followed by ``tokens``."""
        return self.offsets[length + 1] + (index - self.offsets[length]) * self.vocab_size + tokens


def _table_size(vocab_size, depth):
    cells = vocab_size ** (depth + 1)
    if cells > SEQUENCE_LIMIT:
        raise MdsdError(f"vocab_size={vocab_size}, depth={depth}: the test counts V^(L+1) = "
                        f"{cells} sequences, above {SEQUENCE_LIMIT}; a smaller vocab_size or "
                        "depth")


def _row_pair(rng, v, kind):
    """One (p, q) of a kind of ``ROW_KINDS``."""
    if kind == "flat":
        return rng.dirichlet(np.ones(v)), rng.dirichlet(np.ones(v))
    if kind == "peaked":
        return rng.dirichlet(np.full(v, 0.15)), rng.dirichlet(np.full(v, 0.15))
    if kind == "zeros":
        p, q = rng.dirichlet(np.ones(v)), rng.dirichlet(np.ones(v))
        for law in (p, q):
            zero = rng.random(v) < 0.4
            zero[rng.integers(v)] = False
            law[zero] = 0.0
            law /= law.sum()
        return p, q
    if kind == "equal":
        p = rng.dirichlet(np.full(v, 0.5))
        return p, p.copy()
    # Disjoint supports: nothing drafted can be accepted here.
    order = rng.permutation(v)
    half = max(1, v // 2)
    p, q = np.zeros(v), np.zeros(v)
    p[order[:half]] = rng.dirichlet(np.ones(half))
    q[order[half:]] = rng.dirichlet(np.ones(v - half)) if v > half else 1.0
    if v == half:
        q = p.copy()
    return p, q


def _builtin_laws(kind, vocab_size, depth, seed):
    """``"markov"``: rows per context of the last ``MARKOV_ORDER`` tokens,
    each of a random kind of ``ROW_KINDS``; ``"iid"``: one pair at every
    position."""
    rng = np.random.default_rng(seed)
    v = vocab_size
    # Contexts longer than the depth are never read: none are drawn (the
    # rows drawn before them are the same either way).
    order = min(MARKOV_ORDER, depth) if kind == "markov" else 0
    context_offsets = np.cumsum([0] + [v ** d for d in range(order + 1)])
    contexts = int(context_offsets[-1])
    target, draft = np.empty((contexts, v)), np.empty((contexts, v))
    for c in range(contexts):
        row_kind = "flat"
        if kind == "markov" and c > 0:
            row_kind = ROW_KINDS[rng.choice(len(ROW_KINDS), p=ROW_KIND_WEIGHTS)]
        target[c], draft[c] = _row_pair(rng, v, row_kind)
    rows = []
    for d in range(depth + 1):
        keep = min(d, order)
        prefixes = np.arange(v ** d)
        rows.append(context_offsets[keep] + prefixes % (v ** keep))
    index = np.concatenate(rows)
    return _Laws(target[index], draft[index], v, depth, kind)


def _laws(laws, vocab_size, depth, seed):
    if isinstance(laws, str):
        if laws not in ("markov", "iid"):
            raise MdsdError(f"laws={laws!r}: expected 'markov', 'iid', a MarkovLaws or a "
                            "CallbackModel")
        _table_size(vocab_size, depth)
        return _builtin_laws(laws, vocab_size, depth, seed)
    if isinstance(laws, MarkovLaws):
        target, draft = laws.target, laws.draft
    elif isinstance(laws, CallbackModel):
        def target(prefixes):
            return laws.laws("target", prefixes)

        def draft(prefixes):
            return laws.laws("draft", prefixes)
    else:
        raise TypeError(f"laws: expected 'markov', 'iid', a MarkovLaws or a CallbackModel, "
                        f"got {type(laws).__name__}")
    v = laws.vocab_size
    _table_size(v, depth)
    prefixes = _Laws.prefixes(v, depth)
    return _Laws(np.asarray(target(prefixes)), np.asarray(draft(prefixes)), v, depth,
                 type(laws).__name__)


def _framework_arrays(arrays, framework):
    """The verifier's arrays as numpy arrays, or CPU tensors for torch."""
    if framework == "torch":
        import torch
        return tuple(torch.from_numpy(array) for array in arrays)
    return arrays


class _Arrays:
    """The sampler's ``target_probs`` and ``draft_probs``, written in place
    for each batch into one pair of buffers for the whole check: no batch
    allocates them again, which would cost a fresh mapping of memory a
    batch (page faults), both here and in the sampler's own temporaries.
    A sampler must not keep its arrays past its call."""

    def __init__(self, count, paths, depth, vocab_size, instead):
        size = count * paths * (2 * depth + 1) * vocab_size * 8
        if size > ARRAY_BYTES_LIMIT:
            raise MdsdError(f"the sampler's arrays for {count} blocks of {paths} paths of depth "
                            f"{depth} at vocab_size={vocab_size} take {size / 2 ** 30:.1f} GiB, "
                            f"above {ARRAY_BYTES_LIMIT / 2 ** 30:.0f} GiB: {instead}")
        self.target = np.empty((count, paths, depth + 1, vocab_size))
        self.draft = np.empty((count, paths, depth, vocab_size))

    def of(self, laws, blocks):
        """``target_probs``, ``draft_probs``, ``draft_token_ids`` of
        ``blocks`` from ``laws`` (a ``TabledLaws``) in the layout of vLLM's
        rejection sampler, the path axis after B when K > 1."""
        tokens = blocks.tokens
        target, draft = self.target[:len(tokens)], self.draft[:len(tokens)]
        laws.fill_arrays(blocks, target, draft)
        if tokens.shape[1] == 1:
            return target[:, 0], draft[:, 0], tokens[:, 0]
        return target, draft, tokens


def _call(verifier, arrays, framework, rng, torch_generator):
    """The verifier's outputs for ``arrays``, checked for shape: int64
    ``[B, L+1]``."""
    b, depth = arrays[2].shape[0], arrays[2].shape[-1]
    arrays = _framework_arrays(arrays, framework)
    generator = torch_generator if framework == "torch" else rng
    output = _rows.token_array(verifier(*arrays, generator), "the verifier's output")
    if output.shape != (b, depth + 1):
        raise MdsdError(f"the verifier returned shape {output.shape} for {b} blocks of depth "
                        f"{depth}; expected ({b}, {depth + 1}): the accepted draft tokens, one "
                        "recovered or bonus token, then -1")
    return output


def check_block_verifier(verifier, depth, *, paths=1, vocab_size=6, laws="markov",
                         samples=200_000, seed=0, batch_size=4096, level=0.01, control=True,
                         framework="numpy", exact=False):
    """Whether a block sampler preserves the target's law of sequences, in
    vLLM's rejection-sampler layout: ``verifier(target_probs, draft_probs,
    draft_token_ids, rng) -> output_token_ids`` with ``target_probs`` ``[B,
    L+1, V]`` (row j: the target's law after the first j draft tokens; row
    L the bonus position), ``draft_probs`` ``[B, L, V]``, ``draft_token_ids``
    int64 ``[B, L]`` and the output ``[B, L+1]``: the accepted draft tokens,
    one recovered or bonus token, then -1. With ``paths=K > 1`` every input
    gains a path axis after B (the paths drawn i.i.d. from the draft).
    ``framework="torch"`` passes CPU tensors and a ``torch.Generator``
    (torch's global generator is seeded too); outputs may be numpy arrays,
    tensors or lists. The inputs are written again for the next call: a
    sampler must not keep them. Returns a ``BlockVerifierReport``.

    ``laws``: ``"markov"`` (random context-dependent laws from ``seed``,
    mixing flat and peaked rows, zeros, p = q and disjoint supports),
    ``"iid"`` (one pair at every position), a ``MarkovLaws`` or a
    ``CallbackModel`` (its laws after every prefix of up to L tokens).

    Every output, completed to L + 1 tokens by target samples, must have
    the target's law of sequences: Pearson's chi-square over the V^(L+1)
    sequences (pooled where expected counts are small), and of the first
    token alone; a negative control runs the same drafts against a target
    moved by 1.5 times the detectable total variation (lossless is None,
    inconclusive, when that is not detected); E[tau] with its 99% interval
    beside the exact E[tau] of token-by-token SD, of block verification and
    the block optimum (or an upper bound) on the same laws: E[tau] above
    the optimum is proof of loss whatever the chi-square says.

    ``exact=True``: ``verifier(target_probs, draft_probs, draft_token_ids)``
    returns, per block, the law of its output as a dict ``{tuple of tokens:
    probability}``; every draft block is enumerated and the output law
    checked to 1e-9.

    ``docs/check-block.md`` shows a check, a Hugging Face wrapper and what
    each verdict means.
    """
    if not callable(verifier):
        raise TypeError(f"verifier={verifier!r}: expected a function")
    depth = _rows.whole(depth, "depth", least=1)
    paths = _rows.whole(paths, "paths", least=1)
    vocab_size = _rows.whole(vocab_size, "vocab_size", least=2)
    seed = _rows.whole(seed, "seed")
    batch_size = _rows.whole(batch_size, "batch_size", least=1)
    framework = _rows.text(framework, "framework")
    if framework not in ("numpy", "torch"):
        raise MdsdError(f"framework={framework!r}: expected 'numpy' or 'torch'")
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, float, np.floating)):
        raise TypeError(f"level={level!r}: expected a probability, got {type(level).__name__}")
    if not 0 < level < 1:
        raise MdsdError(f"level={level!r}: expected a probability in (0, 1)")
    table = _laws(laws, vocab_size, depth, seed)
    if exact:
        return _check_exact(verifier, table, paths, framework, _references(table, paths))
    samples = _rows.whole(samples, "samples", least=2)
    control = _rows.flag(control, "control")
    # The buffers before the references: a batch too large is refused
    # before any work.
    buffers = _Arrays(min(batch_size, samples), paths, depth, table.vocab_size,
                      "a smaller batch_size")
    return _check_sampled(verifier, table, paths, samples, seed, buffers, float(level), control,
                          framework, _references(table, paths))


def _callback(table):
    """The tabled laws as a CallbackModel, for the library's exact block
    references."""
    v = table.vocab_size

    def lookup(rows):
        def call(prefixes):
            return rows[[int(table.offsets[len(p)]) + _number(p, v) for p in prefixes]]
        return call
    return CallbackModel(lookup(table.target), lookup(table.draft), v, logits=False,
                         cache_size=0)


def _digits(numbers, v, length):
    """The ``length`` base-V digits of each of ``numbers`` (most significant
    first): ``[..., length]`` int64, the tokens of sequences indexed in
    base V."""
    return np.stack(np.unravel_index(numbers, (v,) * length), axis=-1).astype(np.int64)


def _number(prefix, v):
    n = 0
    for token in prefix:
        n = n * v + int(token)
    return n


def _references(table, paths):
    """Exact E[tau] of token-by-token SD and block verification (one path),
    and the block optimum of K paths: the LP where it runs, else the
    closed-form upper bound."""
    model = _callback(table)
    exact = block_efficiency(model, [[]], table.depth, 1, ["token", "bv"], samples=None)
    out = {"token": exact.methods["token"].expected_accepted,
           "bv": exact.methods["bv"].expected_accepted}
    if paths == 1:
        # Block verification is the optimum of one path.
        out.update(optimum=out["bv"], optimum_kind="bv (optimal for one path)")
        return out
    for kind in ("lp", "bound"):
        try:
            figures = block_efficiency(model, [[]], table.depth, paths, [kind], samples=None)
        except MdsdError:
            continue
        out.update(optimum=figures.methods[kind].expected_accepted,
                   optimum_kind="LP" if kind == "lp" else "upper bound (sum of alpha*_d)")
        return out
    out.update(optimum=None, optimum_kind=None)
    return out


def _check_sampled(verifier, table, paths, samples, seed, buffers, level, control, framework,
                   references):
    v, depth = table.vocab_size, table.depth
    torch_generator = None
    if framework == "torch":
        try:
            import torch
        except ImportError as e:
            raise MdsdError("framework='torch' needs torch installed") from e
        torch.manual_seed(seed)
        torch_generator = torch.Generator().manual_seed(seed)
    native = table.native
    law = native.target_sequences()
    detectable = _mdsd.detectable_tv(law, samples, level)
    if control:
        moved_root, control_tv = _moved(table.target[0], 1.5 * detectable)
        moved = native.with_root(moved_root)
    counts = np.zeros(len(law), dtype=np.int64)
    first_counts = np.zeros(v, dtype=np.int64)
    control_counts = np.zeros(len(law), dtype=np.int64)
    tau_counts = np.zeros(depth + 1, dtype=np.int64)
    # Streams of the seed: 3i draws batch i's drafts, 3i + 1 completes its
    # outputs, 3i + 2 the control's; the verifier gets numpy generators.
    verify_rng, control_rng = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 3])
    name = getattr(verifier, "__name__", type(verifier).__name__)
    violation = None
    batch = len(buffers.target)
    for i, first in enumerate(range(0, samples, batch)):
        count = min(batch, samples - first)
        blocks = native.draw(count, paths, seed, 3 * i)
        output = _call(verifier, buffers.of(native, blocks), framework, verify_rng,
                       torch_generator)
        read = native.read(name, output, blocks)
        violation = violation or read.impossible
        tau_counts += np.bincount(read.lengths - 1, minlength=depth + 1)
        sequence = native.complete(read, seed, 3 * i + 1)
        counts += np.bincount(sequence, minlength=len(law))
        first_counts += np.bincount(sequence // v ** depth, minlength=v)
        if control:
            output = _call(verifier, buffers.of(moved, blocks), framework, control_rng,
                           torch_generator)
            read = moved.read(name, output, blocks)
            sequence = moved.complete(read, seed, 3 * i + 2)
            control_counts += np.bincount(sequence, minlength=len(law))
    fit = _mdsd.goodness_of_fit(counts, law, level)
    first_fit = _mdsd.goodness_of_fit(first_counts, table.target[0], level)
    tau_law = tau_counts / samples
    taus = np.arange(depth + 1)
    mean = float(tau_law @ taus)
    spread = float(np.sqrt(max(tau_law @ taus ** 2 - mean ** 2, 0.0) * samples / (samples - 1)))
    half = Z_99 * spread / np.sqrt(samples)
    interval = (mean - half, mean + half)
    reasons = []
    lossless = bool(fit["p_value"] >= level and first_fit["p_value"] >= level)
    if fit["p_value"] < level:
        reasons.append(f"the law of completed blocks is not the target's (chi-square p-value "
                       f"{fit['p_value']:.2e})")
    if first_fit["p_value"] < level:
        reasons.append(f"the first output token's law is not the target's (p-value "
                       f"{first_fit['p_value']:.2e})")
    if violation:
        lossless = False
        reasons.append(violation)
    optimum = references.get("optimum")
    if optimum is not None and interval[0] > optimum + 1e-9:
        lossless = False
        reasons.append(f"E[tau] = {mean:.4f} (99% interval from {interval[0]:.4f}) is above "
                       f"the optimum of any lossless verifier, {optimum:.4f} "
                       f"({references['optimum_kind']}): proof of loss")
    control_fields = {}
    if control:
        control_fit = _mdsd.goodness_of_fit(control_counts, law, level)
        detected = control_fit["p_value"] < level
        control_fields = {"control_tv": control_tv, "control_p_value": control_fit["p_value"],
                          "control_detected": detected}
        if lossless and not detected:
            lossless = None
            reasons.append("the negative control was not detected: the test had no power at "
                           "this sample size (more samples), or the verifier does not read "
                           "its target_probs")
    expected = law * samples
    score = np.abs(counts - expected) / np.sqrt(np.maximum(expected, 1.0))
    worst = [{"sequence": _digits(i, v, depth + 1).tolist(), "expected": float(expected[i]),
              "observed": int(counts[i])} for i in np.argsort(-score, kind="stable")[:5]]
    return BlockVerifierReport(
        mode="sampling", lossless=lossless, depth=depth, paths=paths, vocab_size=v,
        laws=table.source, samples=samples, level=level, p_value=fit["p_value"],
        statistic=fit["statistic"], degrees_of_freedom=fit["degrees_of_freedom"],
        first_token_p_value=first_fit["p_value"], detectable_tv=fit["detectable_tv"],
        expected_accepted=mean, interval_99=interval, tau_law=tau_law.tolist(),
        reference=references, worst=worst, degenerate=mean == 0.0, reasons=reasons,
        **control_fields)


def _enumerate_blocks(table, paths):
    """Every draft block (K-tuple of paths) with its probability, in
    batches of tuples."""
    v, depth = table.vocab_size, table.depth
    single = _digits(np.arange(v ** depth), v, depth)
    index = np.zeros((len(single), depth + 1), dtype=np.int64)
    prob = np.ones(len(single))
    for j in range(depth):
        prob *= table.draft[index[:, j], single[:, j]]
        index[:, j + 1] = table.child(index[:, j], j, single[:, j])
    keep = prob > 0
    single, index, prob = single[keep], index[keep], prob[keep]
    if len(single) ** paths > EXACT_BLOCK_LIMIT:
        raise MdsdError(f"exact mode enumerates {len(single)}^{paths} draft blocks, above "
                        f"{EXACT_BLOCK_LIMIT}: a smaller vocab_size, depth or paths, or "
                        "exact=False")
    grid = np.stack(np.meshgrid(*[np.arange(len(single))] * paths, indexing="ij"),
                    axis=-1).reshape(-1, paths)
    return table.native.blocks(single[grid]), prob[grid].prod(axis=1)


def _check_exact(verifier, table, paths, framework, references):
    v, depth = table.vocab_size, table.depth
    blocks, prob = _enumerate_blocks(table, paths)
    drafts = blocks.tokens
    arrays = _Arrays(len(drafts), paths, depth, v,
                     "a smaller vocab_size, depth or paths, or exact=False").of(table.native, blocks)
    laws = verifier(*_framework_arrays(arrays, framework))
    if len(laws) != len(drafts):
        raise MdsdError(f"the exact verifier returned {len(laws)} laws for {len(drafts)} draft "
                        "blocks: one dict per block")
    output = np.zeros(v ** (depth + 1))
    expected_accepted, law_error = 0.0, 0.0
    tau_law = np.zeros(depth + 1)
    for b, law in enumerate(laws):
        total = 0.0
        for sequence, mass in dict(law).items():
            sequence = [int(t) for t in sequence]
            if not 1 <= len(sequence) <= depth + 1 or any(not 0 <= t < v for t in sequence):
                raise MdsdError(f"the exact verifier's law for block {b} holds {sequence}: "
                                f"1 to {depth + 1} tokens of the vocabulary [0, {v})")
            if not any(drafts[b, k, :len(sequence) - 1].tolist() == sequence[:-1]
                       for k in range(paths)):
                raise MdsdError(f"the exact verifier's law for block {b} holds {sequence}, whose "
                                "accepted tokens are not a drafted prefix")
            total += mass
            weight = prob[b] * mass
            expected_accepted += weight * (len(sequence) - 1)
            tau_law[len(sequence) - 1] += weight
            _extend(table, sequence, weight, output)
        law_error = max(law_error, abs(total - 1.0))
    error = float(np.abs(output - table.native.target_sequences()).max())
    lossless = bool(max(error, law_error) <= BlockVerifierReport.TOLERANCE)
    reasons = [] if lossless else [f"the output law of completed blocks misses the target's "
                                   f"by {max(error, law_error):.3e}"]
    return BlockVerifierReport(
        mode="exact", lossless=lossless, depth=depth, paths=paths, vocab_size=v,
        laws=table.source, max_law_error=max(error, law_error), expected_accepted=expected_accepted,
        tau_law=tau_law.tolist(), reference=references, degenerate=expected_accepted == 0.0,
        reasons=reasons)


def _extend(table, tokens, mass, output):
    """Adds ``mass`` times the target's continuations of ``tokens`` to L + 1
    tokens into ``output`` (indexed in base V)."""
    v, depth = table.vocab_size, table.depth
    index, number = 0, 0
    for j, token in enumerate(tokens):
        number = number * v + token
        if j < depth:
            index = int(table.child(index, j, token))
    # The output's own probability is `mass`; the rest follows p.
    weights = np.array([mass])
    numbers = np.array([number])
    indices = np.array([index])
    for j in range(len(tokens), depth + 1):
        rows = table.target[indices]
        weights = (weights[:, None] * rows).reshape(-1)
        numbers = (numbers[:, None] * v + np.arange(v)[None, :]).reshape(-1)
        if j < depth:
            indices = table.child(np.repeat(indices, v), j, np.tile(np.arange(v), len(indices)))
    np.add.at(output, numbers, weights)


def samples_needed(tv, vocab_size, depth, level=0.01, power=0.99):
    """The fewest sampled blocks at which ``check_block_verifier``'s test
    over the V^(L+1) completed sequences detects a sampler whose law of
    sequences is ``tv`` away from the target's (in total variation), with
    ``power`` at ``level``: assuming every sequence's expected count is at
    least 5 (rarer ones are pooled, which changes the figure little)."""
    vocab_size = _rows.whole(vocab_size, "vocab_size", least=2)
    depth = _rows.whole(depth, "depth", least=1)
    for name, x in (("tv", tv), ("level", level), ("power", power)):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.floating)):
            raise TypeError(f"{name}={x!r}: expected a probability, got {type(x).__name__}")
    return _mdsd.samples_needed(float(tv), vocab_size ** (depth + 1), float(level), float(power))


def _log_rows(x):
    """A log's rows as an array-like read a slice at a time: numpy arrays
    and memory maps as they are, tensors on the host, anything else with a
    ``shape`` and slicing (an HDF5 or zarr dataset) too."""
    if hasattr(x, "detach"):
        x = x.detach().to("cpu").numpy()
    if isinstance(x, (list, tuple)):
        x = np.asarray(x, dtype=np.float64)
    if not hasattr(x, "shape") or not hasattr(x, "__getitem__"):
        raise TypeError(f"target_probs: expected an array [N, V] or [N, L+1, V], got "
                        f"{type(x).__name__}")
    return x


def audit_first_tokens(target_probs, output_token_ids, seed=0, level=0.01):
    """Whether the tokens an engine emitted follow the target's law, from a
    log of real steps, at full vocabulary: ``target_probs`` ``[N, V]`` (the
    target's law at the first position of step i, a different law per row)
    and ``output_token_ids`` ``[N]`` (the token emitted first); or, where
    the log holds the target's law at every position of each block,
    ``[N, L+1, V]`` and the output ``[N, L+1]`` (-1 padded), and every
    emitted token is audited against its position's row.

    For any lossless block verifier the token emitted at position j + 1,
    given that position j + 1 is emitted and the tokens before it, has the
    target's law after those tokens (docs/check-block.md), so the
    randomised probability integral transform u = F(y - 1) + U p(y) of
    every emitted token is uniform on [0, 1], independently of the others,
    whatever order of the vocabulary F runs in. Two orders are tested
    (``PIT_ORDERS``): token ids, and the row's probabilities, most likely
    first (where a sampler that moves mass between likely and unlikely
    tokens shows as a slope); each transform's ``PIT_BINS`` bins by
    chi-square, the two p-values joined by Bonferroni. Returns a
    ``FirstTokenAudit``: ``lossless`` True, False, or None when the test has
    no power (too few tokens), ``p_value``, ``p_values`` (each order's),
    ``detectable_tv`` (the smallest total variation of a binned transform
    detected with 99% power: a loss inside one bin is not seen).

    From first tokens alone it sees the first position only: a sampler
    wrong only at later positions (block verification with a token-wise
    residual, say) passes. Rows are read a slice at a time, so a memory
    map or an HDF5 dataset of a long log works."""
    probs = _log_rows(target_probs)
    tokens = _rows.token_array(output_token_ids, "output_token_ids")
    if len(probs.shape) == 2:
        positions = 1
        if tokens.ndim != 1:
            raise MdsdError(f"output_token_ids has shape {tokens.shape} for target_probs of "
                            f"shape {probs.shape}: one emitted token per step, [N]")
        tokens = tokens[:, None]
    elif len(probs.shape) == 3:
        positions = probs.shape[1]
        if tokens.shape != probs.shape[:2]:
            raise MdsdError(f"output_token_ids has shape {tokens.shape} for target_probs of "
                            f"shape {probs.shape}: [N, L+1], -1 past each block's output")
    else:
        raise MdsdError(f"target_probs has shape {probs.shape}: expected [N, V] or "
                        "[N, L+1, V]")
    n, v = probs.shape[0], probs.shape[-1]
    if n == 0 or v == 0:
        raise MdsdError(f"target_probs has shape {probs.shape}: an empty log")
    if len(tokens) != n:
        raise MdsdError(f"output_token_ids has {len(tokens)} steps for {n} rows of "
                        "target_probs: one per step")
    emitted = tokens >= 0
    if not emitted[:, 0].all():
        i = int(np.argmax(~emitted[:, 0]))
        raise MdsdError(f"output_token_ids[{i}] emits no first token: every step emits one")
    outside = emitted & (tokens >= v)
    if outside.any():
        i = int(np.argmax(outside.any(axis=1)))
        raise MdsdError(f"output_token_ids[{i}] = {tokens[i].tolist()} holds a token outside "
                        f"the vocabulary [0, {v})")
    rng = np.random.default_rng(seed)
    # Rows a slice: about 16 million floats in memory at a time.
    chunk = max(1, (1 << 24) // (v * positions))
    transforms, impossible = {order: [] for order in PIT_ORDERS}, None
    for start in range(0, n, chunk):
        rows = np.asarray(probs[start:start + chunk], dtype=np.float64).reshape(-1, v)
        if not np.isfinite(rows).all() or (rows < 0).any():
            raise MdsdError("target_probs holds a negative or non-finite entry: rows are laws")
        picked = tokens[start:start + chunk].reshape(-1)
        keep = picked >= 0
        rows, picked = rows[keep], picked[keep]
        r = np.arange(len(picked))
        cumulative = np.cumsum(rows, axis=1)
        total = cumulative[:, -1]
        if not (total > 0).all():
            raise MdsdError("a row of target_probs sums to 0: rows are laws")
        mass = rows[r, picked]
        if impossible is None and (mass == 0).any():
            impossible = (f"token {int(picked[np.argmax(mass == 0)])} was emitted where the "
                          "target gives it probability 0")
        uniform = rng.random(len(picked))
        # Each row renormalised: rows stored in narrow floats sum to 1 only
        # within their precision. In probability order, tokens as likely as
        # the emitted one share its step of F.
        below = cumulative[r, picked] - mass
        more_likely = rows.sum(axis=1, where=rows > mass[:, None])
        as_likely = rows.sum(axis=1, where=rows == mass[:, None])
        transforms["token_id"].append((below + uniform * mass) / total)
        transforms["probability"].append((more_likely + uniform * as_likely) / total)
    audited = sum(len(u) for u in transforms["token_id"])
    bins = int(max(2, min(PIT_BINS, audited // 10)))
    per_order = float(level) / len(PIT_ORDERS)
    fits = {}
    for order, values in transforms.items():
        u = np.concatenate(values)
        counts = np.bincount(np.minimum((u * bins).astype(np.int64), bins - 1), minlength=bins)
        fits[order] = _mdsd.goodness_of_fit(counts, np.full(bins, 1.0 / bins), per_order)
    p_values = {order: fit["p_value"] for order, fit in fits.items()}
    p_value = min(1.0, len(PIT_ORDERS) * min(p_values.values()))
    detectable_tv = fits["token_id"]["detectable_tv"]
    lossless = bool(p_value >= level)
    reason = None
    if impossible:
        lossless, reason = False, impossible
    elif not lossless:
        worst = min(p_values, key=p_values.get)
        reason = (f"the emitted tokens do not follow their rows' laws (chi-square p-value "
                  f"{p_values[worst]:.2e} over {bins} bins of the transform in {worst} "
                  "order)")
    elif detectable_tv >= 1.0:
        lossless, reason = None, "too few tokens: the test cannot detect any loss"
    return FirstTokenAudit(lossless=lossless, steps=n, tokens=audited, bins=bins,
                           p_value=p_value, p_values=p_values, detectable_tv=detectable_tv,
                           level=float(level), reason=reason)
