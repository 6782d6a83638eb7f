"""Any layout numpy can express gives the answer of its C-contiguous
float64 copy: Fortran order, transposes, strided and reversed views, for
every function that reads rows (issue: F-contiguous rows were once read as
they lie in memory, down the columns)."""

import numpy as np
import pytest

import mdsd


def _layouts(x):
    """``x`` ([R, V], C order) as other layouts holding the same rows."""
    return {
        "fortran": np.asfortranarray(x),
        "transposed twice": np.asfortranarray(x.T).T,
        "strided": np.repeat(x, 2, axis=1)[:, ::2],
        "reversed rows": x[::-1],
        "reversed tokens": x[:, ::-1],
        "float32 fortran": np.asfortranarray(x.astype(np.float32)),
    }


@pytest.fixture
def logits():
    rng = np.random.default_rng(5)
    return rng.normal(size=(7, 6)) * 2, rng.normal(size=(7, 6)) * 2


@pytest.mark.parametrize("layout", sorted(_layouts(np.zeros((2, 2)))))
def test_alpha_star_and_certificate_read_rows_in_logical_order(logits, layout):
    p, q = logits
    pl, ql = _layouts(p)[layout], _layouts(q)[layout]
    # The reference: the same rows as a C-contiguous float64 copy.
    pc, qc = (np.ascontiguousarray(x, dtype=np.float64) for x in (pl, ql))
    for scheme in ("iid", "wor"):
        want = mdsd.alpha_star(pc, qc, 2, scheme, logits=True)
        got = mdsd.alpha_star(pl, ql, 2, scheme, logits=True)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=layout)
    np.testing.assert_array_equal(mdsd.certificate(pl, ql, 2, logits=True),
                                  mdsd.certificate(pc, qc, 2, logits=True))


def test_a_transposed_array_is_its_rows(logits):
    """The case first reported: X.T of X [V, R] is R rows of V."""
    p, q = logits
    pt, qt = np.ascontiguousarray(p.T).T, np.ascontiguousarray(q.T).T
    assert not pt.flags.c_contiguous and pt.flags.f_contiguous
    np.testing.assert_allclose(mdsd.alpha_star(pt, qt, 2, logits=True),
                               mdsd.alpha_star(p, q, 2, logits=True), rtol=0, atol=1e-12)
    got = mdsd.evaluate(pt, qt, n=[2], schemes=["iid"], verifiers=["specinfer"], logits=True)
    want = mdsd.evaluate(p, q, n=[2], schemes=["iid"], verifiers=["specinfer"], logits=True)
    np.testing.assert_allclose(got.alpha_star["iid"], want.alpha_star["iid"], atol=1e-12)
    np.testing.assert_allclose(got.acceptance["specinfer"], want.acceptance["specinfer"],
                               atol=1e-12)


def test_one_row_views(logits):
    p, q = logits
    column = np.asfortranarray(p)[2]           # a strided 1-D view
    assert not column.flags.c_contiguous
    want = mdsd.solve(np.ascontiguousarray(p[2]), q[2], 2, method="lp", logits=True)
    got = mdsd.solve(column, np.asfortranarray(q)[2], 2, method="lp", logits=True)
    assert abs(got.alpha_star - want.alpha_star) < 1e-12
    verifier = mdsd.Verifier("specinfer", column, np.asfortranarray(q)[2], 2, logits=True)
    reference = mdsd.Verifier("specinfer", p[2].copy(), q[2].copy(), 2, logits=True)
    np.testing.assert_allclose(verifier.conditional([0, 1]), reference.conditional([0, 1]),
                               atol=1e-15)
