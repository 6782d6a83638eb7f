#!/usr/bin/env python3
"""Makes the repository's data files: real rows copied out of ../shared/data,
and small synthetic files that the readers' tests round-trip. Needs numpy and
safetensors (pip install numpy safetensors).

    python3 scripts/make_fixtures.py [path/to/shared/data/qwen-coder]

Writes
* data/qwen-coder-dense-8rows.npz: rows 0, 9, ..., 63 of the dense
  Qwen2.5-Coder 1.5B / 0.5B pairs (V = 151936, float32 probabilities),
  arrays `p` and `q`, each [8, 151936] (tests, benchmarks, examples).
* logits/data/qwen-coder-sparse-32rows.safetensors: rows 0, 32, ..., 992
  of the sparse pairs (top-1024 ids plus a lumped tail), the same tensors
  and header metadata as the original (mdsd eval's built-in sample).
* logits/tests/fixtures/: the same two small distribution pairs written
  by numpy (.npy in float16/32/64, .npz, a directory of .npy files) and by
  safetensors (float16, bfloat16, float32, float64, logits, sparse with
  tail), with expected.json holding the values each file must read back
  as (after its dtype's rounding), and malformed files for the errors.
"""
import json
import os
import sys

import numpy as np
from safetensors import TensorSpec, serialize
from safetensors.numpy import save_file

DENSE_ROWS = [0, 9, 18, 27, 36, 45, 54, 63]
SPARSE_ROWS = list(range(0, 1024, 32))

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


def real_rows(source: str) -> None:
    p = np.load(os.path.join(source, "dense", "p_target.npy"), mmap_mode="r")
    q = np.load(os.path.join(source, "dense", "q_draft.npy"), mmap_mode="r")
    out = os.path.join(ROOT, "data", "qwen-coder-dense-8rows.npz")
    np.savez_compressed(out, p=np.ascontiguousarray(p[DENSE_ROWS]), q=np.ascontiguousarray(q[DENSE_ROWS]))
    print(f"wrote {out}")

    from safetensors import safe_open

    path = os.path.join(source, "sparse", "pairs.safetensors")
    with safe_open(path, "numpy") as f:
        metadata = dict(f.metadata())
        tensors = {k: np.ascontiguousarray(f.get_tensor(k)[SPARSE_ROWS]) for k in f.keys()}
    metadata["R"] = str(len(SPARSE_ROWS))
    metadata["rows_of_original"] = ",".join(map(str, SPARSE_ROWS))
    out = os.path.join(ROOT, "logits", "data", "qwen-coder-sparse-32rows.safetensors")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    save_file(tensors, out, metadata=metadata)
    print(f"wrote {out}")


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16, as bit patterns."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bfloat16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def save_raw(path: str, tensors: dict) -> None:
    """safetensors with any dtype: {name: (dtype, numpy array of its bytes)}."""
    specs = {
        name: TensorSpec(dtype=dtype, shape=list(shape), data_ptr=data.ctypes.data, data_len=data.nbytes)
        for name, (dtype, shape, data) in tensors.items()
    }
    with open(path, "wb") as f:
        f.write(bytes(serialize(specs, None)))


def synthetic() -> None:
    out = os.path.join(ROOT, "logits", "tests", "fixtures")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    p = rng.dirichlet(np.ones(5), size=3)
    q = rng.dirichlet(np.ones(5), size=3)
    expected = {}

    def record(name, target, draft, values="probabilities"):
        expected[name] = {
            "values": values,
            "target": np.asarray(target, dtype=np.float64).tolist(),
            "draft": np.asarray(draft, dtype=np.float64).tolist(),
        }

    for dtype, tag in [(np.float16, "f16"), (np.float32, "f32"), (np.float64, "f64")]:
        os.makedirs(os.path.join(out, f"npy-{tag}"), exist_ok=True)
        np.save(os.path.join(out, f"npy-{tag}", "p_target.npy"), p.astype(dtype))
        np.save(os.path.join(out, f"npy-{tag}", "q_draft.npy"), q.astype(dtype))
        record(f"npy-{tag}", p.astype(dtype), q.astype(dtype))
    np.savez(os.path.join(out, "pairs.npz"), p=p.astype(np.float32), q=q.astype(np.float32))
    record("pairs.npz", p.astype(np.float32), q.astype(np.float32))
    np.savez_compressed(os.path.join(out, "compressed.npz"), p_target=p, q_draft=q)
    record("compressed.npz", p, q)

    for dtype, tag in [(np.float16, "f16"), (np.float32, "f32"), (np.float64, "f64")]:
        save_file({"p": p.astype(dtype), "q": q.astype(dtype)}, os.path.join(out, f"pairs-{tag}.safetensors"))
        record(f"pairs-{tag}.safetensors", p.astype(dtype), q.astype(dtype))
    pb, qb = bfloat16_bits(p), bfloat16_bits(q)
    save_raw(os.path.join(out, "pairs-bf16.safetensors"), {"p": ("bfloat16", p.shape, pb), "q": ("bfloat16", q.shape, qb)})
    record("pairs-bf16.safetensors", bfloat16_values(pb), bfloat16_values(qb))

    # Logits: the readers keep them as read; the transform applies softmax.
    lp, lq = np.log(p) + 3.0, np.log(q) - 1.5
    save_file({"target_logits": lp.astype(np.float32), "draft_logits": lq.astype(np.float32)}, os.path.join(out, "logits.safetensors"))
    record("logits.safetensors", lp.astype(np.float32), lq.astype(np.float32), values="logits")

    # Sparse with tail, K = 3 of V = 8: rows read as K + 1 symbols.
    ids = np.array([[1, 4, 6], [0, 2, 7]], dtype=np.int32)
    sp = np.array([[0.5, 0.2, 0.1], [0.3, 0.3, 0.2]], dtype=np.float32)
    sq = np.array([[0.3, 0.3, 0.3], [0.1, 0.5, 0.2]], dtype=np.float32)
    p_tail = 1.0 - sp.astype(np.float64).sum(axis=1)
    q_tail = 1.0 - sq.astype(np.float64).sum(axis=1)
    save_file(
        {"ids": ids, "p": sp, "q": sq, "p_tail": p_tail, "q_tail": q_tail, "next_token": np.array([4, 2], dtype=np.int32)},
        os.path.join(out, "sparse.safetensors"),
        metadata={"K": "3", "R": "2", "vocab_size": "8"},
    )
    record("sparse.safetensors", np.c_[sp.astype(np.float64), p_tail], np.c_[sq.astype(np.float64), q_tail])

    # Malformed: row counts differ; an integer array; a 0-D array; a missing draft.
    np.savez(os.path.join(out, "bad-rows.npz"), p=p.astype(np.float32), q=q[:2].astype(np.float32))
    np.savez(os.path.join(out, "bad-dtype.npz"), p=(p * 100).astype(np.int32), q=q.astype(np.float32))
    np.savez(os.path.join(out, "bad-shape.npz"), p=np.float64(0.5), q=np.float64(0.5))
    np.savez(os.path.join(out, "no-draft.npz"), p=p)
    save_file({"p": p[:, :4].copy(), "q": q}, os.path.join(out, "bad-vocab.safetensors"))
    not_probs = p.copy()
    not_probs[1] *= 0.5
    np.savez(os.path.join(out, "bad-sum.npz"), p=not_probs, q=q)

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(f"wrote {out}")


def transformed(logits: np.ndarray, temperature=None, top_k=None, top_p=None) -> np.ndarray:
    """The reference of mdsd's transforms, row by row: softmax at the
    temperature, then the k most likely tokens, then the smallest
    most-likely set of mass >= top_p, each renormalised."""
    x = logits.astype(np.float64) / (temperature or 1.0)
    probs = np.exp(x - x.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    for row in probs:
        order = np.argsort(-row, kind="stable")
        if top_k is not None:
            row[order[top_k:]] = 0.0
            row /= row.sum()
        if top_p is not None:
            cumulative = np.cumsum(row[order])
            keep = int(np.searchsorted(cumulative, top_p - 1e-12)) + 1
            row[order[keep:]] = 0.0
            row /= row.sum()
    return probs


def engines() -> None:
    """Inputs shaped as serving engines and Hugging Face write them
    (logits/tests/fixtures/engines/), with numpy's reference of the
    draft-only and target-only transforms."""
    out = os.path.join(ROOT, "logits", "tests", "fixtures", "engines")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(11)
    vocab, batch, positions = 12, 2, 4
    target = rng.normal(scale=2.0, size=(batch, positions, vocab)).astype(np.float32)
    draft = (target + rng.normal(scale=1.0, size=target.shape)).astype(np.float16)
    # torch's logits as [batch, positions, V]: target float32, draft float16.
    np.savez(os.path.join(out, "hf-logits.npz"), target_logits=target, draft_logits=draft)

    # Padded vocabularies: the target's rows 4 longer, padding at -inf as
    # Hugging Face masks it, or holding probability (a cut must refuse it).
    rows = target.reshape(-1, vocab)
    padded = np.concatenate([rows, np.full((rows.shape[0], 4), -np.inf, np.float32)], axis=1)
    np.savez(os.path.join(out, "padded.npz"), target_logits=padded, draft_logits=draft.reshape(-1, vocab))
    heavy = np.concatenate([rows, np.zeros((rows.shape[0], 4), np.float32)], axis=1)
    np.savez(os.path.join(out, "padded-heavy.npz"), target_logits=heavy, draft_logits=draft.reshape(-1, vocab))

    # EAGLE-3: a draft head over 5 of the 12 target tokens, its map as
    # target ids (int32) and as d2t offsets (int64).
    ids = np.array([7, 0, 3, 11, 5], dtype=np.int32)
    np.save(os.path.join(out, "draft-ids.npy"), ids)
    np.save(os.path.join(out, "d2t.npy"), (ids - np.arange(5)).astype(np.int64))
    reduced = draft.reshape(-1, vocab)[:, :5].astype(np.float32)
    np.savez(os.path.join(out, "eagle.npz"), target_logits=rows, draft_logits=reduced)
    full = np.full((rows.shape[0], vocab), -np.inf, np.float32)
    full[:, ids] = reduced
    np.savez(os.path.join(out, "eagle-expanded.npz"), target_logits=rows, draft_logits=full)

    # Side-only transforms, numpy's probabilities after them.
    np.save(os.path.join(out, "target.npy"), transformed(rows))
    np.save(os.path.join(out, "draft.npy"), transformed(draft.reshape(-1, vocab).astype(np.float32)))
    settings = {
        "draft-top-k": ("draft", {"top_k": 3}),
        "draft-temperature-top-p": ("draft", {"temperature": 0.6, "top_p": 0.8}),
        "target-top-k-top-p": ("target", {"top_k": 6, "top_p": 0.9}),
        "target-temperature": ("target", {"temperature": 1.7}),
    }
    for name, (side, setting) in settings.items():
        source = rows if side == "target" else draft.reshape(-1, vocab).astype(np.float32)
        np.save(os.path.join(out, f"{name}.npy"), transformed(source, **setting))
    print(f"wrote {out}")


def main() -> None:
    source = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "data", "qwen-coder")
    real_rows(source)
    synthetic()
    engines()


if __name__ == "__main__":
    main()
