"""A property of the whole Python API: fed random arguments (types,
shapes, layouts, dtypes, huge, zero, negative and non-finite values), a
call gives the answer of its inputs' C-contiguous copies, or raises one of
the documented exceptions (``MdsdError``, another ``ValueError``, or
``TypeError``) with one line; never another exception, a crash, or a run
of more than a few seconds. The cases run in a subprocess under a memory
cap; their arguments are drawn from a fixed seed, and a failure prints the
case to rerun."""

import json
import os
import subprocess
import sys

#: Random calls per run: each API function gets about a fifth of them.
CASES = 3000
#: Seconds the whole run may take (a case takes milliseconds).
TIME_LIMIT_S = 300
MEMORY_CAP_BYTES = 4 << 30

CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (%(cap)d, %(cap)d))
import numpy as np, mdsd

rng = np.random.default_rng(%(seed)d)
pick = lambda options: options[int(rng.integers(len(options)))]

def law(v):
    x = rng.dirichlet(np.full(v, pick([0.1, 1.0])))
    return x

def values(v, rows):
    shape = (v,) if rows is None else (rows, v)
    kind = "law" if rng.random() < 0.85 else pick(["logits", "zeros", "negative", "nan", "inf",
                                                  "huge", "tiny"])
    if kind == "law":
        x = np.stack([law(v) for _ in range(rows)]) if rows else law(v)
    elif kind == "logits":
        x = rng.normal(size=shape) * 5
    elif kind == "zeros":
        x = np.zeros(shape)
    elif kind == "negative":
        x = -np.abs(rng.normal(size=shape))
    elif kind == "nan":
        x = np.full(shape, np.nan)
    elif kind == "inf":
        x = np.full(shape, np.inf)
    elif kind == "huge":
        x = np.full(shape, 1e308)
    else:
        x = np.where(np.arange(v) == 0, 1.0, 1e-300) * np.ones(shape)
    return x

def dressed(x):
    # The same logical array in another dtype, layout or container.
    layouts = ["c", "fortran", "transposed", "broadcast", "reversed", "strided", "list",
               "float32", "float16"]
    hostile = ["int", "complex", "bool", "object", "scalar", "empty", "3d"]
    how = pick(layouts) if rng.random() < 0.85 else pick(hostile)
    if how == "fortran":
        return np.asfortranarray(x)
    if how == "transposed":
        return np.ascontiguousarray(x.T).T if x.ndim == 2 else x
    if how == "broadcast":
        return np.broadcast_to(x, (3,) + x.shape)
    if how == "reversed":
        return np.ascontiguousarray(x[..., ::-1])[..., ::-1]
    if how == "strided":
        wide = np.repeat(x, 2, axis=-1)
        return wide[..., ::2]
    if how == "list":
        return x.tolist()
    if how in ("float32", "float16"):
        return x.astype(how)
    if how == "int":
        return (x * 10).astype(np.int64) if np.isfinite(x).all() else x
    if how == "complex":
        return x + 0j
    if how == "bool":
        return x > 0.3
    if how == "object":
        return np.array([None] * x.shape[-1], dtype=object)
    if how == "scalar":
        return np.float64(0.5)
    if how == "empty":
        return np.zeros((0,) + x.shape[1:]) if x.ndim == 2 else np.zeros(0)
    return x[None] if how == "3d" else x

def c_copy(x):
    # The C-contiguous copy of what the call read: the same values.
    if isinstance(x, list):
        return x
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x)
    return x

def arguments():
    v = pick([1, 2, 3, 7])
    rows = pick([None, None, 1, 4])
    p, q = dressed(values(v, rows)), dressed(values(v, rows))
    if rng.random() < 0.1:
        q = dressed(values(pick([2, 5]), rows))
    n = (pick([1, 2, 3, 2.0, np.int32(2)]) if rng.random() < 0.85
         else pick([0, -1, 2.5, "2", None, 2**64, True]))
    scheme = pick(["iid", "wor", "greedy", "top"]) if rng.random() < 0.9 else pick(["bogus", 3])
    transforms = {}
    for key, options in [("temperature", [0.0, 0.7, -1.0, float("nan"), "x"]),
                         ("top_k", [1, 2, 0, 2.5, -3]), ("top_p", [0.5, 1.0, 0.0, 2.0]),
                         ("logits", [True, False, "no"])]:
        if rng.random() < 0.1:
            transforms[key] = pick(options)
    return p, q, n, scheme, transforms

def run(function, p, q, n, scheme, transforms):
    if function == "alpha_star":
        return mdsd.alpha_star(p, q, n, scheme, **transforms)
    if function == "certificate":
        return mdsd.certificate(p, q, n, scheme, **transforms)
    if function == "evaluate":
        e = mdsd.evaluate(p, q, n=n, schemes=[scheme], verifiers=["specinfer"], samples=200,
                          **transforms)
        return np.concatenate([np.ravel(a) for a in list(e.alpha_star.values())
                               + list(e.acceptance.values())])
    if function == "Verifier":
        v = mdsd.Verifier("specinfer", p, q, n, scheme, **transforms)
        vocab = len(np.asarray(v.conditional([0] * v._n)))
        drafts = np.zeros((4, v._n), dtype=np.int64) + np.arange(4)[:, None] %% vocab
        return np.concatenate([v.conditional(list(drafts[1])), [v.acceptance or -1.0],
                               v.sample_batch(drafts, seed=3)])
    if function == "check_verifier":
        report = mdsd.check_verifier(
            lambda p, q, d, rng: d[:, 0], p, q, n=n, scheme=scheme, samples=500,
            batched=True, control=False)
        return np.array([report.acceptance, report.p_value])

ALLOWED = (ValueError, TypeError)
start = time.monotonic()
returned = 0
for case in range(%(cases)d):
    function = pick(["alpha_star", "certificate", "evaluate", "Verifier", "check_verifier"])
    args = arguments()
    shown = repr((function, *args))[:300]
    try:
        got = run(function, *args)
    except ALLOWED as e:
        if "\n" in str(e):
            print(json.dumps({"case": case, "call": shown, "problem": "two lines: " + str(e)}))
        continue
    except BaseException as e:
        print(json.dumps({"case": case, "call": shown,
                          "problem": f"{type(e).__name__}: {e}"}), flush=True)
        continue
    returned += 1
    p, q, n, scheme, transforms = args
    try:
        want = run(function, c_copy(p), c_copy(q), n, scheme, transforms)
    except BaseException as e:
        print(json.dumps({"case": case, "call": shown,
                          "problem": f"its C copy raised {type(e).__name__}: {e}"}))
        continue
    if not np.array_equal(np.asarray(got), np.asarray(want), equal_nan=True):
        print(json.dumps({"case": case, "call": shown,
                          "problem": f"{got!r} differs from its C copy's {want!r}"}))
print(json.dumps({"done": time.monotonic() - start, "returned": returned}))
"""


def test_random_arguments_give_the_right_answer_or_a_documented_exception():
    source = CHILD % {"cap": MEMORY_CAP_BYTES, "seed": 20261127, "cases": CASES}
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          timeout=TIME_LIMIT_S, env=dict(os.environ, RAYON_NUM_THREADS="2"))
    assert done.returncode == 0, f"crashed (exit {done.returncode}): {done.stderr[-2000:]}"
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert "done" in lines[-1], done.stdout[-2000:]
    problems = lines[:-1]
    assert not problems, "\n".join(json.dumps(p) for p in problems[:20])
    # Not a test of refusals alone: a good share of the calls are valid.
    assert lines[-1]["returned"] >= CASES // 10, lines[-1]
