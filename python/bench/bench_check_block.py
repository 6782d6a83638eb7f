"""The cost of ``mdsd.check_block_verifier`` against the sampler it checks:
the numpy samplers of python/tests/block_samplers.py at V = 6, L = 4,
200 000 blocks with the negative control (the defaults), the sampler timed
by a wrapper. Prints, best of 5, the whole check, the sampler's share and
the checker's own work a block (drafting, gathering the arrays, reading
the outputs, completing them with target samples, counting).

    python python/bench/bench_check_block.py
"""

import sys
import time
from pathlib import Path

import mdsd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import block_samplers  # noqa: E402

SAMPLES = 200_000
DEPTH = 4


def timed(sampler, spent):
    def call(*args):
        start = time.perf_counter()
        out = sampler(*args)
        spent[0] += time.perf_counter() - start
        return out
    return call


def main():
    for name in ("block_verification", "token_sd"):
        best = None
        for _ in range(5):
            spent = [0.0]
            start = time.perf_counter()
            mdsd.check_block_verifier(timed(getattr(block_samplers, name), spent), DEPTH,
                                      samples=SAMPLES)
            total = time.perf_counter() - start
            if best is None or total < best[0]:
                best = (total, spent[0])
        total, sampler = best
        checker = total - sampler
        print(f"{name:20} whole {total:.3f} s  sampler {sampler:.3f} s  checker {checker:.3f} s "
              f"({checker / SAMPLES * 1e6:.2f} us a block, {checker / sampler:.2f}x the sampler)")


if __name__ == "__main__":
    main()
