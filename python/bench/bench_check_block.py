"""The cost of ``mdsd.check_block_verifier`` against the sampler it checks:
the numpy samplers of python/tests/block_samplers.py at V = 6, L = 4,
with the negative control (the defaults), the sampler timed by a wrapper.
Prints, best of 5 at 200 000 and at 20 000 blocks, the whole check, the
sampler's share and the checker's own work, split into its cost a block
(drafting, gathering the arrays, reading the outputs, completing them
with target samples, counting: the difference of the two runs over the
difference of their blocks) and its fixed cost (the laws, the exact
references, the chi-square tests).

    python python/bench/bench_check_block.py
"""

import sys
import time
from pathlib import Path

import mdsd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import block_samplers  # noqa: E402

SAMPLES = 200_000
FEW_SAMPLES = 20_000
DEPTH = 4
REPEATS = 5


def timed(sampler, spent):
    def call(*args):
        start = time.perf_counter()
        out = sampler(*args)
        spent[0] += time.perf_counter() - start
        return out
    return call


def best(sampler, samples):
    """(whole, sampler) seconds of the fastest of ``REPEATS`` checks."""
    runs = []
    for _ in range(REPEATS):
        spent = [0.0]
        start = time.perf_counter()
        mdsd.check_block_verifier(timed(sampler, spent), DEPTH, samples=samples)
        runs.append((time.perf_counter() - start, spent[0]))
    return min(runs)


def main():
    for name in ("block_verification", "token_sd"):
        sampler = getattr(block_samplers, name)
        total, spent = best(sampler, SAMPLES)
        few_total, few_spent = best(sampler, FEW_SAMPLES)
        checker, few_checker = total - spent, few_total - few_spent
        per_block = (checker - few_checker) / (SAMPLES - FEW_SAMPLES)
        fixed = checker - per_block * SAMPLES
        print(f"{name:20} whole {total:.3f} s  sampler {spent:.3f} s  checker {checker:.3f} s: "
              f"{per_block * 1e6:.3f} us a block ({per_block * SAMPLES / spent:.2f}x the "
              f"sampler's {spent / SAMPLES * 1e6:.3f}) + {fixed * 1e3:.1f} ms fixed")


if __name__ == "__main__":
    main()
