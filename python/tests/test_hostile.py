"""The Python door, tried as a careless or hostile user would: one test
per root cause, several instances each. A bad input gets one clear line
(``MdsdError``, a ``ValueError``, or ``TypeError`` for a wrong type)
naming the argument; a valid one gets the right answer; nothing crashes,
aborts or hangs. Each test's cases run in a subprocess under a memory cap
and a time limit, so an allocation of what cannot fit, an abort or a hang
fails the test at once instead of taking the machine down."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

#: The address space a case may use: far below what the inputs would
#: make a careless implementation allocate (tens of GB), well above what
#: the right one needs.
MEMORY_CAP_BYTES = 4 << 30

#: Seconds the cases of one test may take together.
TIME_LIMIT_S = 120

HARNESS = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
import numpy as np, mdsd
rng = np.random.default_rng(0)
P, Q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
CASES = {{}}
{cases}
for name, case in CASES.items():
    try:
        value = case()
        result = {{"name": name, "outcome": "returned", "value": repr(value)[:200]}}
    except BaseException as e:
        result = {{"name": name, "outcome": type(e).__name__, "message": str(e),
                  "bases": [c.__name__ for c in type(e).__mro__]}}
    print(json.dumps(result), flush=True)
"""


def run_cases(cases):
    """Runs the source defining ``CASES`` (name -> zero-argument function)
    in a capped subprocess; returns each case's outcome by name."""
    source = HARNESS.format(cap=MEMORY_CAP_BYTES, cases=textwrap.dedent(cases))
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          timeout=TIME_LIMIT_S, env=dict(os.environ, RAYON_NUM_THREADS="2"))
    assert done.returncode == 0, f"the cases crashed (exit {done.returncode}): {done.stderr}"
    return {r["name"]: r for r in map(json.loads, done.stdout.splitlines())}


def assert_refused(results, expected):
    """Each case named in ``expected`` raised the exception class named
    there (MdsdError or TypeError), with one line that matches its text."""
    for name, (kind, words) in expected.items():
        result = results[name]
        assert result["outcome"] == kind, (name, result)
        assert "\n" not in result["message"], (name, result["message"])
        for word in words:
            assert word in result["message"], (name, word, result["message"])


def test_counts_are_never_truncated_or_coerced():
    results = run_cases("""
        CASES["evaluate n=[1.5]"] = lambda: mdsd.evaluate(P, Q, n=[1.5])
        CASES["evaluate n='2'"] = lambda: mdsd.evaluate(P, Q, n="2")
        CASES["alpha_star n=2.5"] = lambda: mdsd.alpha_star(P, Q, 2.5)
        CASES["alpha_star n='2'"] = lambda: mdsd.alpha_star(P, Q, "2")
        CASES["alpha_star n=True"] = lambda: mdsd.alpha_star(P, Q, True)
        CASES["CallbackModel vocab_size=1.5"] = lambda: mdsd.CallbackModel(
            lambda x: x, lambda x: x, 1.5)
        CASES["check_verifier samples=1.5"] = lambda: mdsd.check_verifier(
            lambda p, q, d, rng: d[0], P, Q, samples=1.5)
        CASES["block_efficiency prompt 1.5"] = lambda: mdsd.block_efficiency(
            mdsd.CallbackModel(mdsd.MarkovLaws(3, 1, 1).target, mdsd.MarkovLaws(3, 1, 1).draft,
                               3, logits=False), [[1.5]], 2, 2, samples=5)
        CASES["Verifier.sample drafts 1.5"] = lambda: mdsd.Verifier(
            "specinfer", P, Q, 2).sample([1.5, 2])
        CASES["top_k=2.5"] = lambda: mdsd.alpha_star(P, Q, 2, top_k=2.5)
        CASES["temperature='hot'"] = lambda: mdsd.alpha_star(P, Q, 2, temperature="hot")
        CASES["logits='no'"] = lambda: mdsd.alpha_star(P, Q, 2, logits="no")
        CASES["scheme=3"] = lambda: mdsd.alpha_star(P, Q, 2, scheme=3)
        CASES["top_p=2"] = lambda: mdsd.alpha_star(P, Q, 2, top_p=2)
        CASES["draft_temperature=-1"] = lambda: mdsd.evaluate(P, Q, draft_temperature=-1)
    """)
    assert_refused(results, {
        "evaluate n=[1.5]": ("MdsdError", ["n=1.5"]),
        "evaluate n='2'": ("TypeError", ["n='2'"]),
        "alpha_star n=2.5": ("MdsdError", ["n=2.5"]),
        "alpha_star n='2'": ("TypeError", ["n='2'"]),
        "alpha_star n=True": ("TypeError", ["n=True"]),
        "CallbackModel vocab_size=1.5": ("MdsdError", ["vocab_size=1.5"]),
        "check_verifier samples=1.5": ("MdsdError", ["samples=1.5"]),
        "block_efficiency prompt 1.5": ("MdsdError", ["prompts[0][0]=1.5"]),
        "Verifier.sample drafts 1.5": ("MdsdError", ["drafts[0]=1.5"]),
        "top_k=2.5": ("MdsdError", ["top_k=2.5"]),
        "temperature='hot'": ("TypeError", ["temperature='hot'"]),
        "logits='no'": ("TypeError", ["logits='no'"]),
        "scheme=3": ("TypeError", ["scheme=3"]),
        "top_p=2": ("MdsdError", ["top_p=2 is invalid", "(0, 1]"]),
        "draft_temperature=-1": ("MdsdError", ["draft_temperature=-1 is invalid"]),
    })


def test_values_outside_64_bits_and_zero_counts_are_refused_by_name():
    results = run_cases("""
        CASES["seed=-1"] = lambda: mdsd.evaluate(P, Q, seed=-1)
        CASES["seed=2**64"] = lambda: mdsd.evaluate(P, Q, seed=2**64)
        CASES["sample seed=-1"] = lambda: mdsd.Verifier("specinfer", P, Q, 2).sample([0, 1], -1)
        CASES["token=-1"] = lambda: mdsd.Verifier("specinfer", P, Q, 2).sample([-1, 1])
        CASES["token=2**70"] = lambda: mdsd.Verifier("specinfer", P, Q, 2).conditional(
            [2**70, 1])
        CASES["max_new_tokens=0"] = lambda: mdsd.speculative_decode(
            mdsd.CallbackModel(mdsd.MarkovLaws(3, 1, 1).target, mdsd.MarkovLaws(3, 1, 1).draft,
                               3, logits=False), [1], 0)
        CASES["instances=0"] = lambda: mdsd.check_verifier(lambda p, q, d: p, instances=0)
        CASES["check n=0"] = lambda: mdsd.check_verifier(lambda p, q, d: p, n=0)
        CASES["batch_size=0"] = lambda: mdsd.check_verifier(
            lambda p, q, d, rng: d[:, 0], samples=10, batched=True, batch_size=0)
        CASES["check seed=-1"] = lambda: mdsd.check_verifier(lambda p, q, d: p, seed=-1)
        CASES["schemes=[] verifiers=[]"] = lambda: mdsd.evaluate(P, Q, schemes=[], verifiers=[])
        CASES["level=2"] = lambda: mdsd.check_verifier(lambda p, q, d, rng: d[0], P, Q,
                                                        samples=10, level=2)
    """)
    assert_refused(results, {
        "seed=-1": ("MdsdError", ["seed=-1"]),
        "seed=2**64": ("MdsdError", ["seed=18446744073709551616"]),
        "sample seed=-1": ("MdsdError", ["seed=-1"]),
        "token=-1": ("MdsdError", ["drafts[0]=-1"]),
        "token=2**70": ("MdsdError", ["drafts[0]="]),
        "max_new_tokens=0": ("MdsdError", ["max_new_tokens=0"]),
        "instances=0": ("MdsdError", ["instances=0"]),
        "check n=0": ("MdsdError", ["n=0"]),
        "batch_size=0": ("MdsdError", ["batch_size=0"]),
        "check seed=-1": ("MdsdError", ["seed=-1"]),
        "schemes=[] verifiers=[]": ("MdsdError", ["nothing to evaluate"]),
        "level=2": ("MdsdError", ["level=2"]),
    })


def test_arrays_that_are_not_real_rows_are_refused():
    results = run_cases("""
        CASES["complex p"] = lambda: mdsd.alpha_star(P + 1j, Q, 2)
        CASES["bool p"] = lambda: mdsd.alpha_star(P > 0.25, Q, 2)
        CASES["ragged p"] = lambda: mdsd.alpha_star([[0.5, 0.5], [1.0]], [[0.5, 0.5], [1.0]], 2)
        CASES["strings"] = lambda: mdsd.alpha_star(["a", "b"], Q, 2)
        CASES["check p zeros"] = lambda: mdsd.check_verifier(
            lambda p, q, d: p, np.zeros(3), Q)
        CASES["check q=None"] = lambda: mdsd.check_verifier(lambda p, q, d: p, P, None)
        CASES["check complex"] = lambda: mdsd.check_verifier(lambda p, q, d: p, P + 0j, Q)
        CASES["independent q not a list"] = lambda: mdsd.alpha_star(P, Q, 2,
                                                                   scheme="independent")
        CASES["evaluate_file int path"] = lambda: mdsd.evaluate_file(3)
    """)
    assert_refused(results, {
        "complex p": ("TypeError", ["p:", "complex"]),
        "bool p": ("TypeError", ["p:", "bool"]),
        "ragged p": ("MdsdError", ["p is not a rectangular array"]),
        "strings": ("TypeError", ["p:"]),
        "check p zeros": ("MdsdError", ["p is not a law"]),
        "check q=None": ("MdsdError", ["give both p and q"]),
        "check complex": ("TypeError", ["p:", "complex"]),
        "independent q not a list": ("TypeError", ["independent drafts take q as a list"]),
        "evaluate_file int path": ("TypeError", ["path=3"]),
    })


def test_draft_arrays_of_any_integer_type_are_read_and_others_named():
    results = run_cases("""
        v = mdsd.Verifier("specinfer", P, Q, 2)
        drafts = np.array([[0, 1], [2, 2], [1, 0]])
        want = v.sample_batch(drafts, seed=5).tolist()
        for dtype in ("int8", "int32", "uint16", "uint64"):
            CASES[dtype] = (lambda d: lambda: v.sample_batch(drafts.astype(d), seed=5).tolist()
                            == want)(dtype)
        CASES["float drafts"] = lambda: v.sample_batch(drafts.astype(float), seed=5)
        CASES["1-D drafts"] = lambda: v.sample_batch(drafts[0], seed=5)
        CASES["3-D drafts"] = lambda: v.sample_batch(drafts[None], seed=5)
        CASES["uint64 past int64"] = lambda: v.sample_batch(
            np.array([[2**63, 1]], dtype=np.uint64))
    """)
    for dtype in ("int8", "int32", "uint16", "uint64"):
        assert results[dtype] == {"name": dtype, "outcome": "returned", "value": "True"}
    assert_refused(results, {
        "float drafts": ("TypeError", ["drafts:", "float64"]),
        "1-D drafts": ("MdsdError", ["drafts has shape (2,)", "[B, n]"]),
        "3-D drafts": ("MdsdError", ["drafts has shape (1, 3, 2)"]),
        "uint64 past int64": ("MdsdError", ["9223372036854775808"]),
    })


def test_block_settings_are_refused_by_their_own_names():
    results = run_cases("""
        laws = mdsd.MarkovLaws(3, 1, 1)
        model = mdsd.CallbackModel(laws.target, laws.draft, 3, logits=False)
        blocks = lambda **k: mdsd.block_efficiency(model, **{"prompts": [[1]], "depth": 2,
                                                            "paths": 2, "samples": 10, **k})
        CASES["paths=0"] = lambda: blocks(paths=0)
        CASES["samples=0"] = lambda: blocks(samples=0)
        CASES["batch=0"] = lambda: blocks(batch=0)
        CASES["methods=[]"] = lambda: blocks(methods=[])
        CASES["prompts=[]"] = lambda: blocks(prompts=[])
        CASES["depth=2**40"] = lambda: blocks(depth=2**40)
        CASES["depth=2**40 exact"] = lambda: blocks(depth=2**40, samples=None)
        CASES["model=3"] = lambda: mdsd.block_efficiency(3, [[1]], 2, 2)
    """)
    assert_refused(results, {
        "paths=0": ("MdsdError", ["paths=0"]),
        "samples=0": ("MdsdError", ["samples=0"]),
        "batch=0": ("MdsdError", ["batch=0"]),
        "methods=[]": ("MdsdError", ["methods", "at least one method"]),
        "prompts=[]": ("MdsdError", ["prompts", "at least one prompt"]),
        "depth=2**40": ("MdsdError", ["draft tree"]),
        "depth=2**40 exact": ("MdsdError", ["above the limit"]),
        "model=3": ("TypeError", ["model:"]),
    })


def test_huge_requests_are_refused_or_run_in_bounded_memory():
    """What a careless implementation allocates whole: 10^9 samples, a
    broadcast view of 10^9 rows, an 8.8 TB tree. Each either runs in
    bounded memory (until its first error here) or is refused before
    allocating."""
    results = run_cases("""
        def stops(p, q, drafts, rng):
            raise RuntimeError("the verifier ran")
        CASES["check_verifier samples=10**9"] = lambda: mdsd.check_verifier(
            stops, P, Q, samples=10**9, batched=True)
        CASES["alpha_star broadcast 10**9"] = lambda: mdsd.alpha_star(
            np.broadcast_to(P, (10**9, 3)), np.broadcast_to(Q, (10**9, 3)), 2)
        CASES["sample_batch broadcast 10**9"] = lambda: mdsd.Verifier(
            "specinfer", P, Q, 2).sample_batch(np.broadcast_to(np.array([[0, 1]]), (10**9, 2)))
        CASES["evaluate broadcast 10**9"] = lambda: mdsd.evaluate(
            np.broadcast_to(P, (10**9, 3)), np.broadcast_to(Q, (10**9, 3)))
        big_p = np.broadcast_to(P, (1000, 3))
        CASES["alpha_star broadcast 1000"] = lambda: bool(np.array_equal(
            mdsd.alpha_star(big_p, np.broadcast_to(Q, (1000, 3)), 2),
            mdsd.alpha_star(np.ascontiguousarray(big_p), np.tile(Q, (1000, 1)), 2)))
    """)
    assert results["check_verifier samples=10**9"]["outcome"] == "RuntimeError"
    assert results["alpha_star broadcast 1000"]["value"] == "True"
    assert_refused(results, {
        "alpha_star broadcast 10**9": ("MdsdError", ["do not fit in memory"]),
        "sample_batch broadcast 10**9": ("MdsdError", ["do not fit in memory"]),
        "evaluate broadcast 10**9": ("MdsdError", ["evaluate_file"]),
    })


def test_a_callback_error_is_one_line_with_the_whole_exception_as_its_cause():
    results = run_cases("""
        laws = mdsd.MarkovLaws(3, 1, 1)
        def multi(prefixes):
            raise ValueError("first line\\nsecond line")
        model = mdsd.CallbackModel(multi, laws.draft, 3, logits=False)
        def cause():
            try:
                model.laws("target", [[1]])
            except mdsd.MdsdError as e:
                return repr(e.__cause__)
        CASES["laws"] = lambda: model.laws("target", [[1]])
        CASES["cause"] = cause
        CASES["blocks"] = lambda: mdsd.block_efficiency(model, [[1]], 2, 2, samples=4)
    """)
    assert_refused(results, {
        "laws": ("MdsdError", ["the target model", "ValueError: first line"]),
        "blocks": ("MdsdError", ["the target model", "ValueError: first line"]),
    })
    assert results["cause"]["value"] == repr(repr(ValueError("first line\nsecond line")))


def test_paths_that_are_not_regular_files_are_refused(tmp_path):
    fifo = tmp_path / "rows.npz"
    os.mkfifo(fifo)
    results = run_cases(f"""
        CASES["fifo"] = lambda: mdsd.evaluate_file({str(fifo)!r})
        CASES["bytes path to a fifo"] = lambda: mdsd.evaluate_file({os.fsencode(fifo)!r})
        CASES["dev zero"] = lambda: mdsd.evaluate_file("/dev/zero")
    """)
    for name in ("fifo", "bytes path to a fifo", "dev zero"):
        assert results[name]["outcome"] == "MdsdError", results[name]
        assert "not a regular file" in results[name]["message"] or \
            "not a file" in results[name]["message"], results[name]
