"""Rows of a decoding loop for the Rust grids: the target's and the draft's
next-token laws (temperature 1) after a prompt and each prefix of the
target's greedy continuation, written as ``DIR/qwen-coder/dense/
p_target.npy`` and ``q_draft.npy`` (float32, one row per step), the layout
the grids read where ``MDSD_SHARED_DATA`` points.

    python python/bench/decode_rows.py --models DIR [--rows 20] [--out DIR]

``--models`` holds the GGUF files of ``../shared/models/fetch_models.sh``
(the Qwen2.5-Coder pair); needs torch, transformers and accelerate. Then,
for instance, ``MDSD_SHARED_DATA=OUT GRID_SCHEMES=wor GRID_K=151936
GRID_BUDGETS_MS=none cargo bench -p mdsd-benches --bench budget_grid``.
"""

import argparse
from pathlib import Path

import numpy as np

import mdsd
import mdsd.hf

TARGET_GGUF = "qwen2.5-coder-1.5b-instruct.gguf"
DRAFT_GGUF = "qwen2.5-coder-0.5b-instruct.gguf"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", required=True, help="the folder of the GGUF files")
    parser.add_argument("--prompt", default="def fibonacci(n):")
    parser.add_argument("--rows", type=int, default=20, help="steps of the continuation")
    parser.add_argument("--out", default="decode-rows")
    args = parser.parse_args()
    if args.rows < 1:
        parser.error(f"--rows: {args.rows}; give at least 1")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    def load(gguf):
        return AutoModelForCausalLM.from_pretrained(args.models, gguf_file=gguf,
                                                    torch_dtype="auto")

    tokenizer = AutoTokenizer.from_pretrained(args.models, gguf_file=TARGET_GGUF)
    target, draft = load(TARGET_GGUF), load(DRAFT_GGUF)
    model = mdsd.CallbackModel(mdsd.hf.causal_lm_fn(target, temperature=1.0),
                               mdsd.hf.causal_lm_fn(draft, temperature=1.0),
                               target.config.vocab_size)
    context = list(tokenizer(args.prompt)["input_ids"])
    p_rows, q_rows = [], []
    for _ in range(args.rows):
        p = model.laws("target", [context])[0]
        p_rows.append(p)
        q_rows.append(model.laws("draft", [context])[0])
        context.append(int(np.argmax(p)))
    folder = Path(args.out) / "qwen-coder" / "dense"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "p_target.npy", np.asarray(p_rows, np.float32))
    np.save(folder / "q_draft.npy", np.asarray(q_rows, np.float32))
    print(f"{args.rows} rows of V = {len(p_rows[0])} in {folder}")


if __name__ == "__main__":
    main()
