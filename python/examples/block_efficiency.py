"""Block efficiency of block verifiers on a Hugging Face model pair: K draft
paths of L tokens drawn from the draft model after real prompts, verified
by every method on the same trees (mdsd.block_efficiency).

    python python/examples/block_efficiency.py --dir MODELS \\
        --target-gguf qwen2.5-coder-1.5b-instruct.gguf \\
        --draft-gguf qwen2.5-coder-0.5b-instruct.gguf --depth 4 --paths 1,2,4

(``../shared/models/fetch_models.sh MODELS`` puts the shared data's
Qwen2.5-Coder pair in MODELS/models.) ``--tiny`` runs a random pair built
from a config instead.
"""

import argparse
import time

import mdsd
import mdsd.hf

PROMPTS = [
    "def quicksort(xs):\n",
    "import numpy as np\n\ndef softmax(x):\n",
    "class Stack:\n    def __init__(self):\n",
    "# Read a CSV file and print the mean of each column\n",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="folder of the GGUF files (or of a Hugging Face model)")
    parser.add_argument("--target-gguf")
    parser.add_argument("--draft-gguf")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--paths", default="1,2,4")
    parser.add_argument("--methods", default="token,bv,gbv,specinfer,optimal-convex")
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()

    if args.tiny:
        import importlib.util
        import pathlib
        spec = importlib.util.spec_from_file_location(
            "decode", pathlib.Path(__file__).with_name("speculative_decode.py"))
        decode = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(decode)
        target, draft, _ = decode.tiny_pair()
        prompts = [[1, 2, 3], [4, 5]]
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(args.dir, gguf_file=args.target_gguf)
        target = AutoModelForCausalLM.from_pretrained(args.dir, gguf_file=args.target_gguf)
        draft = AutoModelForCausalLM.from_pretrained(args.dir, gguf_file=args.draft_gguf)
        prompts = [tokenizer(text)["input_ids"] for text in PROMPTS]
    model = mdsd.CallbackModel(mdsd.hf.causal_lm_fn(target, temperature=args.temperature),
                               mdsd.hf.causal_lm_fn(draft, temperature=args.temperature),
                               target.config.vocab_size)
    methods = args.methods.split(",")
    print(f"L = {args.depth}, {args.samples} blocks per K over {len(prompts)} prompts")
    print(f"{'K':>3} " + "".join(f"{m:>22}" for m in methods) + f"{'seconds':>9}")
    for paths in [int(k) for k in args.paths.split(",")]:
        start = time.perf_counter()
        report = mdsd.block_efficiency(model, prompts, args.depth, paths, methods,
                                       samples=args.samples, batch=args.batch)
        cells = "".join(
            f"{f.expected_accepted:>10.3f} [{f.interval_99[0]:.2f},{f.interval_99[1]:.2f}]"
            for f in report.methods.values())
        print(f"{paths:>3} {cells}{time.perf_counter() - start:>9.0f}")


if __name__ == "__main__":
    main()
