"""mdsd.Verifier("optimal-convex") prepared from Python on real rows, the
draft truncated to its top 1000 tokens, for n in {2, 4, 8}: the mean time
of a call over the rows, the figure to hold against the Rust one of the
same preparation from a built problem,

    cargo bench -p mdsd-benches --bench convex -- optimal_convex_prepare

(the same 8 rows of data/). The Python call also turns the arrays into
the problem (checks, renormalisation at V = 151936); both timings of the
truncation are printed: q truncated beforehand, as the Rust bench does,
and ``draft_top_k=1000``, which truncates inside the call.
"""

import time
from pathlib import Path

import numpy as np

import mdsd

ROOT = Path(__file__).resolve().parents[2]


def top_k(q, k):
    """q with all but its k most likely tokens zeroed, renormalised."""
    kept = np.zeros_like(q)
    order = np.argsort(-q, kind="stable")[:k]
    kept[order] = q[order]
    return kept / kept.sum()


def mean_ms(calls, rounds=20):
    """The mean time of a call, over ``rounds`` passes through ``calls``;
    the median pass of 5."""
    passes = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(rounds):
            for call in calls:
                call()
        passes.append((time.perf_counter() - start) / (rounds * len(calls)))
    return sorted(passes)[2] * 1e3


def main():
    data = np.load(ROOT / "data" / "qwen-coder-dense-8rows.npz")
    rows = [(p.astype(np.float64), q.astype(np.float64)) for p, q in zip(data["p"], data["q"])]
    truncated = [(p, top_k(q, 1000)) for p, q in rows]
    print("| n | Verifier(p, q_top1000) ms | Verifier(p, q, draft_top_k=1000) ms |")
    print("|---|---|---|")
    for n in (2, 4, 8):
        before = mean_ms([lambda p=p, q=q: mdsd.Verifier("optimal-convex", p, q, n)
                          for p, q in truncated])
        inside = mean_ms([lambda p=p, q=q: mdsd.Verifier("optimal-convex", p, q, n,
                                                        draft_top_k=1000) for p, q in rows])
        print(f"| {n} | {before:.3f} | {inside:.3f} |")


if __name__ == "__main__":
    main()
