"""Sampler throughput: rehearsal_gym.core.sampling.sample vs transformers' model.generate.

Same model, batch, prompt and number of new tokens (no early stop), both sampling at
temperature 1 on CPU. Prints tokens/s of each and their ratio.

    python benchmarks/sampler_speed.py --batch 16 --new-tokens 64
    python benchmarks/sampler_speed.py --batch 16 --new-tokens 64 --compile   # + torch.compile (opt-in)
"""

from __future__ import annotations

import argparse
import time

import torch

from rehearsal_gym.core.model import LM, LMConfig
from rehearsal_gym.core.sampling import sample
from rehearsal_gym.core.tokenizer import train_tokenizer
from rehearsal_gym.rehearsal.demos import corpus_texts, record_oracle_episodes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time our sampler on torch.compile(model) (compiling is not timed)",
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    demos = record_oracle_episodes("Retail-v0", range(50))
    lm = LM.new(train_tokenizer(corpus_texts(demos), vocab_size=1000), LMConfig())
    prompt = lm.start + lm.turn("task", demos[0].transcript[0][1]) + lm.prompt("agent")
    prompts = [prompt] * args.batch
    ids = torch.tensor(prompts)
    mask = torch.ones_like(ids)

    def ours():
        sample(
            lm.model,
            prompts,
            max_new_tokens=args.new_tokens,
            stop_id=None,
            pad_id=lm.pad_id,
            generator=torch.Generator().manual_seed(0),
        )

    def hf():
        with torch.no_grad():
            lm.model.generate(
                ids,
                attention_mask=mask,
                do_sample=True,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                pad_token_id=lm.pad_id,
                top_k=0,
                top_p=1.0,
            )

    compiled_model = torch.compile(lm.model, dynamic=True) if args.compile else None

    def compiled():
        sample(
            compiled_model,
            prompts,
            max_new_tokens=args.new_tokens,
            stop_id=None,
            pad_id=lm.pad_id,
            generator=torch.Generator().manual_seed(0),
        )

    runs = [("rehearsal_gym.sample", ours), ("model.generate", hf)]
    runs += [("sample, compiled model", compiled)] if args.compile else []
    results = {}
    for name, fn in runs:
        fn()  # warm up (and compile)
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            fn()
        seconds = (time.perf_counter() - t0) / args.repeats
        results[name] = args.batch * args.new_tokens / seconds
        print(
            f"{name:>22}: {results[name]:8.0f} tokens/s  (batch {args.batch}, {args.new_tokens} new tokens, "
            f"prompt {len(prompt)} tokens, {lm.num_parameters():,} params)"
        )
    print(f"ratio sample / generate: {results['rehearsal_gym.sample'] / results['model.generate']:.2f}x")
    if args.compile:
        print(
            f"ratio compiled sample / generate: {results['sample, compiled model'] / results['model.generate']:.2f}x"
        )


if __name__ == "__main__":
    main()
