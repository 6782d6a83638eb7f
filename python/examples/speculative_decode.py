"""Multi-draft speculative decoding over a Hugging Face model pair with any
built-in verifier, printing tokens per target call next to what the
models' laws predict (1 + the verifier's acceptance; 1 + alpha* for the
optimal verifier), and the mean milliseconds of a step's parts: the draft
model's call and the drafts, the target's call, the verifier (prepared on
the step's laws, then verifying), and the verifier's share of the step.
``--budget-ms`` gives the optimal verifier a time budget per step.

    python python/examples/speculative_decode.py \\
        --target Qwen/Qwen2.5-1.5B --draft Qwen/Qwen2.5-0.5B \\
        --prompt "def fibonacci(n):" --n 4 --verifiers specinfer,optimal-convex

GGUF files (``../shared/models/fetch_models.sh`` fetches the shared data's
Qwen2.5-Coder pair) load with ``--target DIR --target-gguf FILE``
(transformers dequantises them, with the ``gguf`` and ``accelerate``
packages). A tiny random pair built from a config
(``--tiny``) runs anywhere in seconds, for a smoke test.
"""

import argparse

import numpy as np

import mdsd
import mdsd.hf


def load(name, gguf):
    from transformers import AutoModelForCausalLM
    kwargs = {"gguf_file": gguf} if gguf else {}
    return AutoModelForCausalLM.from_pretrained(name, torch_dtype="auto", **kwargs)


def tiny_pair():
    import torch
    import transformers
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        config = transformers.GPT2Config(vocab_size=64, n_positions=512, n_embd=32, n_layer=2,
                                         n_head=2, bos_token_id=0, eos_token_id=0)
        models.append(transformers.GPT2LMHeadModel(config).eval())
    return models[0], models[1], None


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--target-gguf")
    parser.add_argument("--draft-gguf")
    parser.add_argument("--tiny", action="store_true", help="a tiny random pair (no download)")
    parser.add_argument("--prompt", default="def fibonacci(n):")
    parser.add_argument("--n", type=int, default=2, help="drafts per step")
    parser.add_argument("--scheme", default="iid", choices=["iid", "wor"])
    parser.add_argument("--verifiers", default="specinfer,optimal-convex")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-ms", type=float,
                        help="the optimal verifier's time budget per step (optimal-convex)")
    args = parser.parse_args()

    if args.tiny:
        target, draft, tokenizer = tiny_pair()
        prompt = [1, 2, 3]
    else:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(args.target, gguf_file=args.target_gguf)
        target = load(args.target, args.target_gguf)
        draft = load(args.draft, args.draft_gguf)
        prompt = tokenizer(args.prompt)["input_ids"]
    vocab = target.config.vocab_size
    model = mdsd.CallbackModel(mdsd.hf.causal_lm_fn(target, temperature=args.temperature),
                               mdsd.hf.causal_lm_fn(draft, temperature=args.temperature), vocab)
    print(f"{'verifier':<16}{'tokens/call':>12}{'predicted':>11}{'1 + alpha*':>11}"
          f"{'steps':>7}{'draft ms':>10}{'target ms':>10}{'verify ms':>10}{'share':>7}")
    for verifier in args.verifiers.split(","):
        params = {}
        if verifier == "optimal-convex" and args.budget_ms is not None:
            params["budget_ms"] = args.budget_ms
        run = mdsd.speculative_decode(model, prompt, args.max_new_tokens, n=args.n,
                                      verifier=verifier, scheme=args.scheme, seed=args.seed,
                                      **params)
        # The steps' acceptances are Bernoulli draws: the 99% half-width of
        # their mean, for reading the two columns against each other.
        # A verifier rated only by sampling has no prediction: "-".
        accept = run["predicted_tokens_per_target_call"] - 1
        predicted = "-"
        if not np.isnan(accept):
            half = 2.576 * np.sqrt(max(accept * (1 - accept), 0) / run["steps"])
            predicted = f"{accept + 1:.3f}±{half:.2f}"
        ms = run["step_ms"]
        share = ms["verifier"] / sum(ms.values())
        print(f"{verifier:<16}{run['tokens_per_target_call']:>12.3f}{predicted:>13}"
              f"{1 + run['alpha_star']:>11.3f}{run['steps']:>7}"
              f"{ms['draft']:>10.2f}{ms['target']:>10.2f}{ms['verifier']:>10.2f}{share:>7.1%}")
        if tokenizer is not None:
            print("   ", repr(tokenizer.decode(run["tokens"])))
    if args.budget_ms is not None:
        print("optimal-convex under --budget-ms: its predicted column is the selected token's "
              "acceptance, a lower bound (a rejected selection's residual draw may land on "
              "another draft)")


if __name__ == "__main__":
    main()
