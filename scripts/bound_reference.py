"""The numpy reference of `mdsd bound` for iid drafts, the baseline of the
`bound` benchmark in benches/README.md: alpha* = 1 + min over prefixes H of
the ascending p/q order of p(H) - q(H)^n (docs/DESIGN.md §3), by a full
sort per row, as a user without mdsd would write it.

    python scripts/bound_reference.py DIR N   # DIR holds p_target.npy, q_draft.npy
"""

import sys

import numpy as np


def alpha_star_iid(p, q, n):
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q > 0, p / q, np.inf)
    order = np.argsort(ratio, kind="stable")
    p_in = np.cumsum(p[order])
    q_in = np.cumsum(q[order])
    return 1.0 + min(0.0, float(np.min(p_in - q_in**n)))


def main():
    directory, n = sys.argv[1], int(sys.argv[2])
    p = np.load(f"{directory}/p_target.npy").astype(np.float64)
    q = np.load(f"{directory}/q_draft.npy").astype(np.float64)
    p /= p.sum(axis=1, keepdims=True)
    q /= q.sum(axis=1, keepdims=True)
    for row in range(p.shape[0]):
        print(row, repr(alpha_star_iid(p[row], q[row], n)))


if __name__ == "__main__":
    main()
