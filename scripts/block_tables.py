#!/usr/bin/env python3
"""The tables of docs/blocks.md: E[tau] of every block method against the
block LP or the interval [best lossless method, bound], by `mdsd block`
(exact enumeration); with --real, sampled on a real row pair of data/ at
full vocabulary. Usage: scripts/block_tables.py [--real] [path/to/mdsd]."""

import json
import subprocess
import sys

ARGS = [a for a in sys.argv[1:] if a != "--real"]
MDSD = ARGS[0] if ARGS else "target/release/mdsd"
Z_99 = 2.576
TOY = ["-p", "0.3333333333333333,0.6666666666666667", "-q", "0.6666666666666667,0.3333333333333333"]
PATH_METHODS = ["token", "bv", "gbv", "traversal", "hsd", "specinfer", "optimal-convex"]
LOSSY = {"hsd"}


def run(laws, shape, methods):
    """One method at a time: a method that does not apply, or an LP past
    its budget, leaves its cell empty."""
    out = {}
    for method in methods:
        cmd = [MDSD, "block", *laws, *shape, "--methods", method, "--json"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode == 0:
            report = json.loads(done.stdout)["methods"][0]
            out[method] = (report["expected_accepted"], report["max_law_error"])
    return out


def cell(value):
    return "" if value is None else f"{value[0]:.4f}" + (" (lossy)" if value[1] and value[1] > 1e-9 else "")


def optimum(row):
    if "lp" in row:
        return f"{row['lp'][0]:.4f} (LP)"
    lossless = [v[0] for k, v in row.items() if k not in LOSSY | {"bound"} and (v[1] or 0) < 1e-9]
    if "bound" in row and lossless:
        return f"[{max(lossless):.4f}, {row['bound'][0]:.4f}]"
    return ""


def path_table(title, laws):
    print(f"\n{title}\n")
    print("| L | K | " + " | ".join(PATH_METHODS) + " | optimum |")
    print("|---|---|" + "---|" * (len(PATH_METHODS) + 1))
    for depth in (2, 4):
        for k in (1, 2, 4):
            row = run(laws, ["--depth", str(depth), "--paths", str(k)], PATH_METHODS + ["lp", "bound"])
            cells = [cell(row.get(m)) for m in PATH_METHODS]
            print(f"| {depth} | {k} | " + " | ".join(cells) + f" | {optimum(row)} |")


def tree_table(title, laws):
    methods = ["bv", "traversal", "specinfer", "rrs-wor", "optimal-convex", "deterministic"]
    print(f"\n{title}\n")
    print("| tree | children | " + " | ".join(methods) + " | LP |")
    print("|---|---|" + "---|" * (len(methods) + 1))
    for tree in ("2,1", "2,2", "3,1", "2,1,1"):
        for children in ("iid", "wor", "top"):
            row = run(laws, ["--tree", tree, "--children", children], methods + ["lp"])
            cells = [cell(row.get(m)) for m in methods]
            lp = f"{row['lp'][0]:.4f}" if "lp" in row else ""
            print(f"| {tree} | {children} | " + " | ".join(cells) + f" | {lp} |")


def sampled_cell(command):
    """E[tau] ± the 99% half-width of one sampled `mdsd block --json` run,
    empty where the method does not apply."""
    done = subprocess.run([MDSD, "block", *command, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        return ""
    r = json.loads(done.stdout)["methods"][0]
    return f"{r['expected_accepted']:.3f} ± {Z_99 * r['standard_error']:.3f}"


def real_table(row, samples):
    """Sampled E[tau] ± the 99% half-width, the real row as the law at every
    position (a context model: not the two models on their own drafts)."""
    laws = ["--data", "data/qwen-coder-dense-8rows.npz", "--row", str(row)]
    print(f"\nRow {row} of `data/qwen-coder-dense-8rows.npz` (V = 151936) at every position, "
          f"{samples} sampled blocks a cell, E[tau] ± 99% half-width:\n")
    print("| L | K | " + " | ".join(PATH_METHODS) + " |")
    print("|---|---|" + "---|" * len(PATH_METHODS))
    for depth in (2, 4):
        for k in (1, 2, 4):
            cells = [sampled_cell([*laws, "--depth", str(depth), "--paths", str(k),
                                   "--methods", method, "--samples", str(samples)])
                     for method in PATH_METHODS]
            print(f"| {depth} | {k} | " + " | ".join(cells) + " |")


def sampled_tree_table(laws, samples):
    """Engine-sized trees, sampled: E[tau] ± the 99% half-width."""
    methods = ["bv", "traversal", "specinfer", "rrs-wor", "optimal-convex", "deterministic"]
    print(f"\nEngine-sized trees on `{' '.join(laws)}`, {samples} sampled blocks a cell, "
          "E[tau] ± 99% half-width:\n")
    print("| tree | children | " + " | ".join(methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    for tree in ("4,2,2,1", "2,2,2,2"):
        for children in ("iid", "wor", "top"):
            cells = [sampled_cell([*laws, "--tree", tree, "--children", children,
                                   "--methods", method, "--samples", str(samples)])
                     for method in methods]
            print(f"| {tree} | {children} | " + " | ".join(cells) + " |")


if "--real" in sys.argv[1:]:
    real_table(0, 2000)
    sys.exit(0)

path_table("The toy of docs/TEST_VECTORS.md:", TOY)
for seed in (1, 2):
    path_table(f"Markov model `--markov {seed} --markov-vocab 2 --order 1`:",
               ["--markov", str(seed), "--markov-vocab", "2", "--order", "1"])
tree_table("Trees on `--markov 3 --markov-vocab 3 --order 1`:",
           ["--markov", "3", "--markov-vocab", "3", "--order", "1"])
sampled_tree_table(["--markov", "3", "--markov-vocab", "8", "--order", "1"], 20_000)
