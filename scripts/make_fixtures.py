#!/usr/bin/env python3
"""Copies the real-row fixture the tests and benchmarks use out of ../shared/data.

Rows 0, 9, 18, 27, 36, 45, 54, 63 of the dense Qwen2.5-Coder 1.5B / 0.5B pairs
(full vocabulary 151936, float32 probabilities), saved as a compressed .npz with
arrays `p` (target) and `q` (draft), each [8, 151936]. Needs numpy.

    python3 scripts/make_fixtures.py [path/to/shared/data/qwen-coder]
"""
import os
import sys

import numpy as np

ROWS = [0, 9, 18, 27, 36, 45, 54, 63]

def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    source = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "shared", "data", "qwen-coder")
    p = np.load(os.path.join(source, "dense", "p_target.npy"), mmap_mode="r")
    q = np.load(os.path.join(source, "dense", "q_draft.npy"), mmap_mode="r")
    out = os.path.join(here, "..", "data", "qwen-coder-dense-8rows.npz")
    np.savez_compressed(out, p=np.ascontiguousarray(p[ROWS]), q=np.ascontiguousarray(q[ROWS]))
    print(f"wrote {out}")

if __name__ == "__main__":
    main()
