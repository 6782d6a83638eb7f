"""Whole-process timing of `mdsd bound` against the numpy reference
(scripts/bound_reference.py) on the same rows, alternated, with each run's
peak memory: the `bound` figures of benches/README.md.

    python scripts/bench_bound.py DIR [N] [RUNS] [--arguments]   # DIR: p_target.npy, q_draft.npy

`mdsd bound` reads DIR as `--data DIR`, or with `--arguments` as
`-p DIR/p_target.npy -q DIR/q_draft.npy`. Both print alpha* of every row
(iid, n = N); the script checks they agree to 1e-9 and reports median
seconds, peak RSS and the ratio.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MDSD = os.environ.get("MDSD", os.path.join(HERE, "..", "target", "release", "mdsd"))


def run(command):
    """Seconds, peak RSS (MB) and stdout of one run, in a child of its own."""
    start = time.perf_counter()
    child = os.fork()
    if child == 0:
        with open("/tmp/bench_bound.out", "w") as out:
            os.dup2(out.fileno(), 1)
            os.execvp(command[0], command)
    _, status, usage = os.wait4(child, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        sys.exit(f"{command} failed")
    with open("/tmp/bench_bound.out") as out:
        return seconds, usage.ru_maxrss / 1024, out.read()


def main():
    arguments = "--arguments" in sys.argv
    positional = [a for a in sys.argv[1:] if a != "--arguments"]
    directory = positional[0]
    n = positional[1] if len(positional) > 1 else "4"
    runs = int(positional[2]) if len(positional) > 2 else 5
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in ("p_target.npy", "q_draft.npy"))
    if arguments:
        rows = ["-p", os.path.join(directory, "p_target.npy"),
                "-q", os.path.join(directory, "q_draft.npy")]
    else:
        rows = ["--data", directory]
    mdsd = [MDSD, "bound", *rows, "-n", n, "--json"]
    numpy = [sys.executable, os.path.join(HERE, "bound_reference.py"), directory, n]
    times = {"mdsd": [], "numpy": []}
    peaks = {"mdsd": [], "numpy": []}
    for _ in range(runs):
        for name, command in (("mdsd", mdsd), ("numpy", numpy)):
            seconds, peak, out = run(command)
            times[name].append(seconds)
            peaks[name].append(peak)
            if name == "mdsd":
                ours = [row["alpha_star"] for row in json.loads(out)["rows"]]
            else:
                theirs = [float(line.split()[1]) for line in out.splitlines()]
    worst = max(abs(a - b) for a, b in zip(ours, theirs))
    if worst > 1e-9:
        sys.exit(f"alpha* differs by {worst}")
    for name in ("mdsd", "numpy"):
        print(
            f"{name:6} median {statistics.median(times[name]):.3f} s "
            f"(runs {', '.join(f'{t:.3f}' for t in times[name])}), "
            f"peak {max(peaks[name]):.0f} MB"
        )
    print(
        f"ratio {statistics.median(times['numpy']) / statistics.median(times['mdsd']):.1f}x; "
        f"files {size / 2**20:.1f} MB, mdsd peak {max(peaks['mdsd']) / (size / 2**20):.2f}x their size; "
        f"alpha* agree to {worst:.1e}"
    )


if __name__ == "__main__":
    main()
