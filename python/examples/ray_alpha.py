"""alpha* over a corpus of logit shards with Ray Data, one Parquet row per
position.

Each shard is what ``mdsd eval --data`` reads: a ``.npz`` or
``.safetensors`` file of target and draft rows, or a directory of ``.npy``
files. Ray maps ``mdsd.evaluate_file`` over the shards (``map_batches``,
one shard per task); within a task mdsd reads the shard a window at a time
and computes on all the task's cores, so memory stays bounded whatever the
shard's size. The output has one row per position: the shard, the row in
it, and alpha* for each n.

Run it on this machine::

    python ray_alpha.py SHARDS_DIR OUT_DIR --n 1 2 4 8

On a cluster, start it where the Ray head is reachable and point it there
(``--address auto`` on a node of the cluster, ``ray://HEAD:10001`` from
outside); the shards and OUT_DIR must be paths every node sees (a shared
file system, or ``s3://`` for OUT_DIR, which Ray Data writes directly)::

    python ray_alpha.py /mnt/corpus/shards /mnt/corpus/alpha --address auto
"""

import argparse
from pathlib import Path

import numpy as np
import ray

import mdsd

SHARD_SUFFIXES = (".npz", ".safetensors")


def shards(directory):
    """The shards of ``directory``, sorted: data files and ``.npy`` folders."""
    found = [path for path in sorted(Path(directory).iterdir())
             if path.suffix in SHARD_SUFFIXES or (path.is_dir() and any(path.glob("*.npy")))]
    if not found:
        raise SystemExit(f"{directory}: no .npz, .safetensors or .npy-folder shards")
    return found


def alpha_of_shards(batch, ns, scheme):
    """One Ray Data batch of shard paths to one output row per position."""
    columns = {"shard": [], "row": [], **{f"alpha_star_n{n}": [] for n in ns}}
    for path in batch["path"]:
        alpha = mdsd.evaluate_file(path, n=ns, schemes=[scheme], verifiers=[]).alpha_star[scheme]
        columns["shard"] += [Path(path).name] * len(alpha)
        columns["row"] += range(len(alpha))
        for j, n in enumerate(ns):
            columns[f"alpha_star_n{n}"] += alpha[:, j].tolist()
    return {key: np.asarray(value) for key, value in columns.items()}


def run(shards_dir, out_dir, ns=(1, 2, 4, 8), scheme="iid"):
    """Writes ``out_dir`` as Parquet; returns the number of rows written."""
    paths = [{"path": str(path)} for path in shards(shards_dir)]
    dataset = ray.data.from_items(paths).map_batches(
        alpha_of_shards, fn_kwargs={"ns": list(ns), "scheme": scheme}, batch_size=1)
    dataset.write_parquet(str(out_dir))
    return ray.data.read_parquet(str(out_dir)).count()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shards", help="a directory of shards")
    parser.add_argument("out", help="where the Parquet files go")
    parser.add_argument("--n", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--scheme", default="iid")
    parser.add_argument("--address", default=None,
                        help="a Ray cluster (auto, ray://HEAD:10001); default: a local Ray")
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray")
    args = parser.parse_args(argv)
    ray.init(address=args.address, num_cpus=None if args.address else args.num_cpus)
    rows = run(args.shards, args.out, args.n, args.scheme)
    print(f"{rows} positions written to {args.out}")


if __name__ == "__main__":
    main()
