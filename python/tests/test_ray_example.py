"""python/examples/ray_alpha.py on a local Ray (2 CPUs) over a few
generated shards: one Parquet row per position, alpha* as mdsd computes it
directly. Skipped where ray is not installed."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import mdsd

ray = pytest.importorskip("ray", reason="ray is optional: pip install 'ray[data]' to run this")
pd = pytest.importorskip("pandas", reason="reading the Parquet output needs pandas")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ray_alpha.py"


def load_example():
    spec = importlib.util.spec_from_file_location("ray_alpha", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ray_example_writes_one_row_per_position(tmp_path):
    rng = np.random.default_rng(0)
    shards, want = tmp_path / "shards", {}
    shards.mkdir()
    for s, rows in enumerate([3, 5, 4]):
        # Logits in two shards, probabilities in the third, as engines dump.
        p = rng.normal(size=(rows, 64)) * 3
        q = rng.normal(size=(rows, 64)) * 3
        if s == 2:
            p, q = np.exp(p) / np.exp(p).sum(-1, keepdims=True), np.exp(q) / np.exp(q).sum(
                -1, keepdims=True)
            np.savez(shards / f"shard{s}.npz", p=p, q=q)
        else:
            np.savez(shards / f"shard{s}.npz", target_logits=p, draft_logits=q)
        want[f"shard{s}.npz"] = np.stack(
            [mdsd.alpha_star(p, q, n, logits=s != 2) for n in (1, 2, 4)], axis=-1)
    example = load_example()
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        written = example.run(shards, tmp_path / "out", ns=[1, 2, 4])
    finally:
        ray.shutdown()
    frame = pd.read_parquet(tmp_path / "out")
    assert written == len(frame) == 12
    for (shard, row), group in frame.groupby(["shard", "row"]):
        got = group[["alpha_star_n1", "alpha_star_n2", "alpha_star_n4"]].to_numpy()[0]
        assert np.allclose(got, want[shard][row], rtol=0, atol=1e-12), (shard, row)
