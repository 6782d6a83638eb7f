"""mdsd.alpha_star against a numpy sort-based reference of the same closed
form, in one process, and the overhead of a small call.

    python python/bench/bench_alpha_star.py [DIR]   # DIR: p_target.npy, q_draft.npy

DIR defaults to the 8 rows of data/ (repeated to 32); with the shared data,
its first 32 rows. Prints medians of 7 runs and the ratio.
"""

import statistics
import sys
import time
from pathlib import Path

import numpy as np

import mdsd

ROOT = Path(__file__).resolve().parents[2]


def reference(p, q, n):
    """alpha* of every row by a stable argsort and a prefix scan."""
    out = np.empty(p.shape[0])
    for r in range(p.shape[0]):
        pr = p[r].astype(np.float64)
        qr = q[r].astype(np.float64)
        pr /= pr.sum()
        qr /= qr.sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(qr > 0, pr / qr, np.inf)
        order = np.argsort(ratio, kind="stable")
        out[r] = 1.0 + min(0.0, float((np.cumsum(pr[order]) - np.cumsum(qr[order]) ** n).min()))
    return out


def median_seconds(f, runs=7):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    if len(sys.argv) > 1:
        p = np.load(Path(sys.argv[1]) / "p_target.npy")[:32]
        q = np.load(Path(sys.argv[1]) / "q_draft.npy")[:32]
    else:
        rows = np.load(ROOT / "data" / "qwen-coder-dense-8rows.npz")
        p, q = np.tile(rows["p"], (4, 1)), np.tile(rows["q"], (4, 1))
    p, q = np.ascontiguousarray(p, dtype=np.float32), np.ascontiguousarray(q, dtype=np.float32)
    n = 4
    ours = mdsd.alpha_star(p, q, n)
    theirs = reference(p, q, n)
    assert np.allclose(ours, theirs, atol=1e-9), np.abs(ours - theirs).max()
    t_ours = median_seconds(lambda: mdsd.alpha_star(p, q, n))
    t_theirs = median_seconds(lambda: reference(p, q, n))
    print(f"{p.shape} float32, n = {n}: mdsd {t_ours * 1e3:.1f} ms, numpy {t_theirs * 1e3:.1f} ms, "
          f"ratio {t_theirs / t_ours:.1f}x (agree to {np.abs(ours - theirs).max():.1e})")
    small = (np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]))
    calls = 20000
    t_small = median_seconds(lambda: [mdsd.alpha_star(*small, 2) for _ in range(calls)], runs=5)
    print(f"V = 3: {t_small / calls * 1e6:.1f} us per call, whole call")


if __name__ == "__main__":
    main()
