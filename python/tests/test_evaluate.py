"""mdsd.evaluate and mdsd.evaluate_file: what `mdsd eval` computes, the
same numbers (sampled verifiers included, seeded alike), shaped as the
rows came."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mdsd

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "qwen-coder-dense-8rows.npz"
SCHEMES = ["iid", "wor", "greedy", "argmax", "top"]


def test_evaluate_file_agrees_with_the_command_line(mdsd_binary):
    binary = mdsd_binary
    verifiers = ["specinfer", "khisti", "optimal-convex"]
    out = subprocess.run(
        [str(binary), "eval", "--data", str(DATA), "--json", "--verifiers", ",".join(verifiers),
         "--samples", "2000", "--seed", "3", "--row", "2", "--rows", "5"],
        check=True, capture_output=True, text=True).stdout
    want = json.loads(out)["per_row"]
    got = mdsd.evaluate_file(DATA, verifiers=verifiers, samples=2000, seed=3, first_row=2, rows=5)
    assert got.alpha_star["iid"].shape == (5, 4)
    for r, row in enumerate(want):
        for scheme in SCHEMES:
            assert np.allclose(got.alpha_star[scheme][r], row["alpha_star"][scheme],
                               rtol=0, atol=1e-12), (r, scheme)
        for name in verifiers:
            acceptance = [entry["acceptance"] for entry in row["verifiers"][name]]
            # The convex solver stops within its tolerance, from wherever
            # its previous solve left it; the others are closed forms or
            # the same seeded draws.
            atol = 1e-7 if name == "optimal-convex" else 1e-12
            assert np.allclose(got.acceptance[name][r], acceptance, rtol=0, atol=atol), (
                r, name)
    assert got.rated_scheme["khisti"] == "iid"
    assert np.isnan(got.interval_99["specinfer"][0]).all()
    low, high = got.interval_99["khisti"]
    assert (low <= got.acceptance["khisti"]).all() and (got.acceptance["khisti"] <= high).all()


def test_evaluate_keeps_the_leading_shape_and_agrees_with_alpha_star():
    rng = np.random.default_rng(4)
    logits_p, logits_q = rng.normal(size=(2, 3, 40)) * 2, rng.normal(size=(2, 3, 40)) * 2
    settings = {"logits": True, "temperature": 0.8, "top_k": 20}
    got = mdsd.evaluate(logits_p, logits_q, n=[1, 3], schemes=["iid", "wor"],
                        verifiers=["specinfer", "optimal-convex"], **settings)
    assert got.alpha_star["iid"].shape == (2, 3, 2)
    for j, n in enumerate([1, 3]):
        for scheme in ["iid", "wor"]:
            want = mdsd.alpha_star(logits_p, logits_q, n, scheme, **settings)
            assert np.allclose(got.alpha_star[scheme][..., j], want, rtol=0, atol=1e-12)
    alpha = got.alpha_star["iid"]
    assert (got.acceptance["specinfer"] <= alpha + 1e-9).all()
    assert np.allclose(got.acceptance["optimal-convex"], alpha, rtol=0, atol=1e-6)


def test_to_pandas():
    got = mdsd.evaluate(np.full((2, 4), 0.25), [[0.4, 0.3, 0.2, 0.1]] * 2, n=[1, 2],
                        schemes=["iid"], verifiers=[])
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install pandas"):
            got.to_pandas()
        pytest.skip("pandas is optional: the message was checked")
    frame = got.to_pandas()
    assert list(frame.columns) == ["row", "n", "alpha_star/iid"]
    assert len(frame) == 4 and frame["n"].tolist() == [1, 2, 1, 2]


def test_evaluate_errors(tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        mdsd.evaluate([0.5, 0.5], [0.5, 0.5], n=[0])
    with pytest.raises(ValueError, match="among its 8 rows"):
        mdsd.evaluate_file(DATA, first_row=6, rows=5)
    with pytest.raises(ValueError, match="missing"):
        mdsd.evaluate_file(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="row 1"):
        mdsd.evaluate([[0.5, 0.5], [0.5, 0.7]], [[0.5, 0.5], [0.5, 0.5]], n=[1])


def test_evaluate_file_reads_logits_as_the_file_names_them(tmp_path):
    rng = np.random.default_rng(9)
    p, q = rng.normal(size=(3, 30)) * 2, rng.normal(size=(3, 30)) * 2
    np.savez(tmp_path / "dump.npz", target_logits=p, draft_logits=q)
    got = mdsd.evaluate_file(tmp_path / "dump.npz", n=[2], schemes=["iid"], verifiers=[])
    want = mdsd.alpha_star(p, q, 2, logits=True)
    assert np.allclose(got.alpha_star["iid"][:, 0], want, rtol=0, atol=1e-12)


def test_independent_drafts_and_verifiers_on_named_schemes():
    """Independent drafts from a list of laws taken in turn, alpha* as
    `mdsd.alpha_star` gives it, and verifiers rated on named schemes."""
    rng = np.random.default_rng(4)
    p = rng.dirichlet(np.ones(6), size=3)
    laws = [rng.dirichlet(np.ones(6), size=3) for _ in range(2)]
    e = mdsd.evaluate(p, laws, n=[2, 4], schemes=["iid", "independent"],
                      verifiers=["optimal-convex@independent", "optimal-convex@wor", "specinfer"])
    cycled = [laws[0], laws[1], laws[0], laws[1]]
    for j, n in enumerate([2, 4]):
        exact = mdsd.alpha_star(p, cycled[:n], n, scheme="independent")
        np.testing.assert_allclose(e.alpha_star["independent"][:, j], exact, atol=1e-12)
        np.testing.assert_allclose(e.alpha_star["iid"][:, j], mdsd.alpha_star(p, laws[0], n),
                                   atol=1e-12)
        reached = e.acceptance["optimal-convex@independent"][:, j]
        assert np.all(reached <= exact + 1e-12) and np.all(reached >= exact - 1e-6)
        wor = mdsd.alpha_star(p, laws[0], n, scheme="wor")
        np.testing.assert_allclose(e.acceptance["optimal-convex@wor"][:, j], wor, atol=1e-6)
    assert e.rated_scheme["optimal-convex@wor"] == "wor"
    with pytest.raises(mdsd.MdsdError, match="rrs-wor"):
        mdsd.evaluate(p, laws[0], n=[2], verifiers=["rrs-wor@iid"])


@pytest.mark.parametrize("n, error", [([1.5], mdsd.MdsdError), ([2.7], mdsd.MdsdError),
                                      (["2"], TypeError), ([True], TypeError), ([0], mdsd.MdsdError),
                                      ([], mdsd.MdsdError)])
def test_counts_are_never_truncated(n, error):
    """A number of drafts is a whole number: 1.5 is refused, not run as 1,
    and a string is a TypeError naming the argument."""
    with pytest.raises(error, match="n="):
        mdsd.evaluate([0.5, 0.5], [0.5, 0.5], n=n, schemes=["iid"], verifiers=[])


def test_whole_floats_and_numpy_integers_are_counts():
    e = mdsd.evaluate([0.5, 0.5], [0.5, 0.5], n=[np.int64(2), 4.0], schemes=["iid"],
                      verifiers=[], samples=np.uint16(10), seed=np.int32(3))
    assert e.n.tolist() == [2, 4]
    with pytest.raises(mdsd.MdsdError, match="samples=1.5"):
        mdsd.evaluate([0.5, 0.5], [0.5, 0.5], n=[2], samples=1.5)
    with pytest.raises(mdsd.MdsdError, match="samples=1.5"):
        mdsd.check_verifier(lambda p, q, d, rng: d[:, 0], [0.5, 0.5], [0.5, 0.5], samples=1.5,
                            batched=True)
