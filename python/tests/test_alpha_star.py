"""mdsd.alpha_star and mdsd.certificate against a numpy reference of the
closed form, the command line on real rows, and the errors users meet."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mdsd

ROOT = Path(__file__).resolve().parents[2]


def reference_iid(p, q, n):
    """alpha* = 1 + min over prefixes H of the ascending p/q order of
    p(H) - q(H)^n (docs/DESIGN.md §3), by a sort, in float64."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    p, q = p / p.sum(), q / q.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q > 0, p / q, np.inf)
    order = np.argsort(ratio, kind="stable")
    value = np.cumsum(p[order]) - np.cumsum(q[order]) ** n
    return 1.0 + min(0.0, float(value.min()))


def softmax(logits, temperature=1.0):
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def test_one_row_is_a_float():
    value = mdsd.alpha_star([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], n=2)
    assert isinstance(value, float)
    assert abs(value - 0.86) < 1e-12


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_batches_match_the_reference(dtype):
    rng = np.random.default_rng(7)
    shape = (2, 3, 40)
    p = rng.dirichlet(np.full(40, 0.3), size=shape[:2]).astype(dtype)
    q = rng.dirichlet(np.full(40, 0.3), size=shape[:2]).astype(dtype)
    for n in (1, 2, 5):
        got = mdsd.alpha_star(p, q, n)
        assert got.shape == (2, 3)
        for b in range(2):
            for t in range(3):
                # float16 rows sum to 1 only within their rounding: both
                # sides renormalise the same stored values in float64.
                want = reference_iid(p[b, t], q[b, t], n)
                assert abs(got[b, t] - want) < 1e-12, (n, b, t)


def test_logits_and_per_side_transforms():
    rng = np.random.default_rng(3)
    target, draft = rng.normal(size=(4, 30)) * 2, rng.normal(size=(4, 30)) * 2
    got = mdsd.alpha_star(target, draft, 3, logits=True, temperature=0.7, draft_temperature=1.5)
    for r in range(4):
        want = reference_iid(softmax(target[r], 0.7), softmax(draft[r], 1.5), 3)
        assert abs(got[r] - want) < 1e-12


def test_certificate_proves_alpha():
    rng = np.random.default_rng(11)
    p, q = rng.dirichlet(np.ones(25), size=5), rng.dirichlet(np.ones(25), size=5)
    alpha = mdsd.alpha_star(p, q, 4)
    mask = mdsd.certificate(p, q, 4)
    assert mask.shape == (5, 25) and mask.dtype == np.bool_
    for r in range(5):
        pr, qr = p[r] / p[r].sum(), q[r] / q[r].sum()
        value = pr[mask[r]].sum() + 1 - qr[mask[r]].sum() ** 4
        assert abs(value - alpha[r]) < 1e-12


def test_contiguous_input_is_not_copied_and_views_work():
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.ones(20), size=6)
    q = rng.dirichlet(np.ones(20), size=6)
    # A strided view (every other row) is read as it is.
    got = mdsd.alpha_star(p[::2], q[::2], 2)
    assert np.allclose(got, [reference_iid(p[r], q[r], 2) for r in (0, 2, 4)], atol=1e-12)


def test_errors_are_value_errors_with_one_line():
    with pytest.raises(mdsd.MdsdError) as caught:
        mdsd.alpha_star([0.5, 0.6], [0.5, 0.5], 2)
    assert isinstance(caught.value, ValueError)
    assert "sum to 1.1" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="row 1"):
        mdsd.alpha_star([[0.5, 0.5], [0.5, -0.5]], [[0.5, 0.5], [0.5, 0.5]], 2)
    with pytest.raises(ValueError, match="must match"):
        mdsd.alpha_star(np.full((2, 3), 1 / 3), np.full((3, 3), 1 / 3), 2)
    with pytest.raises(ValueError, match="scheme"):
        mdsd.alpha_star([0.5, 0.5], [0.5, 0.5], 2, scheme="nonsense")

    class OnTheGpu:
        class device:
            type = "cuda"

    with pytest.raises(ValueError, match=r"\.cpu\(\)"):
        mdsd.alpha_star(OnTheGpu(), [0.5, 0.5], 2)


def test_torch_tensors_when_torch_is_installed():
    torch = pytest.importorskip("torch", reason="torch is optional")
    p = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float32)
    q = torch.tensor([[0.2, 0.3, 0.5]], dtype=torch.bfloat16)
    assert abs(mdsd.alpha_star(p, q, 2)[0] - 0.86) < 1e-2


def test_real_rows_agree_with_the_command_line(mdsd_binary):
    binary = mdsd_binary
    data = ROOT / "data" / "qwen-coder-dense-8rows.npz"
    rows = np.load(data)
    out = subprocess.run([str(binary), "bound", "--data", str(data), "-n", "4", "--json"],
                         check=True, capture_output=True, text=True).stdout
    want = [row["alpha_star"] for row in json.loads(out)["rows"]]
    got = mdsd.alpha_star(rows["p"], rows["q"], 4)
    assert np.allclose(got, want, rtol=0, atol=1e-12)


def test_docstring_examples():
    import doctest

    for module in (mdsd, mdsd.optimum, mdsd.evaluation, mdsd.verifier, mdsd.check, mdsd.live):
        failures, tried = doctest.testmod(module, extraglobs={"mdsd": mdsd, "np": np})
        assert tried > 0 and failures == 0, module


def test_independent_drafts_take_a_list():
    p = [0.4, 0.3, 0.2, 0.1]
    q = [[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]]
    assert abs(mdsd.alpha_star(p, q, 2, scheme="independent") - 0.98) < 1e-12


def test_type_stubs_match_the_module():
    """The stubs of the native module and the annotations of the Python
    ones agree with what the module holds (mypy's stubtest)."""
    try:
        import mypy.stubtest  # noqa: F401
    except ImportError:
        pytest.skip("mypy is not installed (pip install mypy); .ci/run installs it")
    here = ROOT / "python"
    command = [sys.executable, "-m", "mypy.stubtest", "mdsd", "--mypy-config-file",
               str(here / "mypy.ini")]
    # mdsd.hf is checked where torch and transformers import, and passed
    # over where they do not (stubtest cannot import it there).
    if not all(importlib.util.find_spec(name) for name in ("torch", "transformers")):
        command += ["--allowlist", str(here / "stubtest-allowlist.txt")]
    out = subprocess.run(command, capture_output=True, text=True,
                         cwd=ROOT / "python" / "tests")
    assert out.returncode == 0, out.stdout + out.stderr
