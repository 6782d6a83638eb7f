"""The optimal verifier from Python against the closed form of the same
rows, in one process: ``mdsd.optimal_rules`` (the batch of a decoding
step) under several time budgets, and ``mdsd.solve(method="convex")`` row
by row, each as milliseconds per row and as a ratio to
``mdsd.alpha_star`` of the same rows (one batch, with the certificate's
scheme: i.i.d. and without replacement). Each measurement is the best of
three, the calls alternated.

    python python/bench/bench_optimal_rules.py [DIR] [ROWS]   # DIR: p_target.npy, q_draft.npy

DIR defaults to the 8 rows of data/; with the shared data, its first ROWS
(default 16) rows.
"""

import sys
import time
from pathlib import Path

import numpy as np

import mdsd

ROOT = Path(__file__).resolve().parents[2]
N = 4
BUDGETS_MS = [0.0, 1.0, 5.0, None]


def rows():
    if len(sys.argv) > 1:
        count = int(sys.argv[2]) if len(sys.argv) > 2 else 16
        p = np.load(Path(sys.argv[1]) / "p_target.npy")[:count]
        q = np.load(Path(sys.argv[1]) / "q_draft.npy")[:count]
    else:
        data = np.load(ROOT / "data" / "qwen-coder-dense-8rows.npz")
        p, q = data["p"], data["q"]
    return np.ascontiguousarray(p, np.float64), np.ascontiguousarray(q, np.float64)


def best_of_three(calls):
    """Seconds of each call, best of three rounds, the calls alternated."""
    best = {name: float("inf") for name in calls}
    for _ in range(3):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main():
    p, q = rows()
    count = p.shape[0]
    print(f"{count} rows, V = {p.shape[1]}, n = {N}: ms per row, ratio to alpha_star")
    for scheme in ["iid", "wor"]:
        calls = {"alpha_star": lambda: mdsd.alpha_star(p, q, N, scheme)}
        for budget in BUDGETS_MS:
            calls[f"optimal_rules budget_ms={budget}"] = (
                lambda budget=budget: mdsd.optimal_rules(p, q, N, scheme, budget_ms=budget))
        calls["solve row by row"] = lambda: [mdsd.solve(p[r], q[r], N, "convex", scheme)
                                             for r in range(count)]
        mdsd.optimal_rules(p[:1], q[:1], N, scheme)   # warm-up
        best = best_of_three(calls)
        base = best["alpha_star"]
        for name, seconds in best.items():
            gap = ""
            if name.startswith("optimal_rules"):
                budget = BUDGETS_MS[list(best).index(name) - 1]
                rules = mdsd.optimal_rules(p, q, N, scheme, budget_ms=budget)
                gap = f"  mean gap {float(np.mean(rules.gap)):.1e}"
            print(f"  {scheme:<4}{name:<32}{seconds / count * 1e3:>9.2f} ms"
                  f"{seconds / base:>8.1f}x{gap}")


if __name__ == "__main__":
    main()
