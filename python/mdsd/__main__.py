"""``python -m mdsd check-block module:function --depth L ...``: the check
of a user's block sampler from the shell, as ``check_block_verifier`` runs
it. Exit 0: lossless; 1: not lossless; 2: inconclusive, or bad input (one
line on stderr)."""

import argparse
import importlib
import sys

from ._mdsd import MdsdError
from .block_check import check_block_verifier


def _function(spec):
    """``module:function`` (the module importable from the current
    directory) as a callable."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise MdsdError(f"verifier {spec!r}: expected module:function")
    sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise MdsdError(f"verifier {spec!r}: cannot import {module_name!r} ({e})") from e
    function = module
    for part in name.split("."):
        if not hasattr(function, part):
            raise MdsdError(f"verifier {spec!r}: {module_name!r} has no {name!r}")
        function = getattr(function, part)
    if not callable(function):
        raise MdsdError(f"verifier {spec!r}: {name!r} is not a function")
    return function


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line and exit 2, as every mdsd command fails.
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv=None):
    parser = _Parser(prog="python -m mdsd", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser(
        "check-block", help="check a block sampler in vLLM's rejection-sampler layout")
    check.add_argument("verifier", help="module:function")
    check.add_argument("--depth", type=int, required=True, help="draft tokens L per block")
    check.add_argument("--paths", type=int, default=1, help="i.i.d. draft paths K")
    check.add_argument("--vocab-size", type=int, default=6)
    check.add_argument("--laws", default="markov", choices=["markov", "iid"])
    check.add_argument("--samples", type=int, default=200_000)
    check.add_argument("--seed", type=int, default=0)
    check.add_argument("--batch-size", type=int, default=4096)
    check.add_argument("--level", type=float, default=0.01)
    check.add_argument("--no-control", action="store_true", help="skip the negative control")
    check.add_argument("--framework", default="numpy", choices=["numpy", "torch"])
    check.add_argument("--exact", action="store_true",
                       help="the function returns each block's output law")
    args = parser.parse_args(argv)
    try:
        report = check_block_verifier(
            _function(args.verifier), args.depth, paths=args.paths, vocab_size=args.vocab_size,
            laws=args.laws, samples=args.samples, seed=args.seed, batch_size=args.batch_size,
            level=args.level, control=not args.no_control, framework=args.framework,
            exact=args.exact)
    except (MdsdError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report)
    return {True: 0, False: 1, None: 2}[report.lossless]


if __name__ == "__main__":
    sys.exit(main())
