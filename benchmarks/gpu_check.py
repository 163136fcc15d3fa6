"""The GPU check: one short script to run whenever a CUDA machine is available (never in CI).

    python benchmarks/gpu_check.py                          # the shipped default, bf16 on CUDA vs CPU
    python benchmarks/gpu_check.py --model Qwen/Qwen2.5-0.5B-Instruct --tasks 8 --lora 16

On each device (CUDA when available, then CPU for the ratio) it loads the model, runs SelfSim-v0
in replace and wrap modes, two PPO iterations (bf16 on CUDA, float32 on CPU), and prints the
sampler's tokens/s against `model.generate`, episodes/s, peak GPU memory, and the ratios of
benchmarks/rollout_speed.py (late vs early turns, a rehearsed vs a real round). Finishes in well
under 5 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import torch
from rehearsal_gym.agents import PPOConfig, PPOTrainer
from rollout_speed import round_time, turn_cost  # benchmarks/rollout_speed.py, beside this script

import rehearsal_gym  # noqa: F401 - registers the env ids
from rehearsal_gym.core.rollout import run_episodes
from rehearsal_gym.core.sampling import sample
from rehearsal_gym.defaults import resolve_lm


def sampler_vs_generate(lm, batch: int, new_tokens: int) -> tuple[float, float]:
    """Tokens/s of the package's sampler and of `model.generate` on the same prompts."""
    prompts = [
        lm.start + lm.turn("task", f"Request: add {i} and {i + 1}") + lm.prompt("agent") for i in range(batch)
    ]
    rates = []
    for use_generate in (False, True):
        sync()
        t0 = time.perf_counter()
        if use_generate:
            width = max(map(len, prompts))
            ids = torch.tensor([[lm.pad_id] * (width - len(p)) + p for p in prompts], device=lm.device)
            lm.model.generate(
                ids,
                attention_mask=(ids != lm.pad_id).long(),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=True,
                pad_token_id=lm.pad_id,
            )
        else:
            sample(lm.model, prompts, max_new_tokens=new_tokens, stop_id=None, pad_id=lm.pad_id)
        sync()
        rates.append(batch * new_tokens / (time.perf_counter() - t0))
    return rates[0], rates[1]


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def check(model: str | None, device: str, dtype: str, tasks: int, lora: int) -> dict[str, float]:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    lm = resolve_lm(model, device=device, dtype=dtype)
    row = {"device": device, "dtype": dtype, "parameters": lm.num_parameters()}
    row["conversation / call format"] = f"{lm.codec.kind} / {lm.call_format}"
    row["sampler tok/s"], row["generate tok/s"] = sampler_vs_generate(lm, batch=16, new_tokens=64)
    for mode in ("replace", "wrap"):
        envs = [
            gym.make(
                "SelfSim-v0",
                base="ToolCall-v0",
                model=lm,
                mode=mode,
                bank_tasks=10,
                call_format=lm.call_format,
            )
            for _ in range(tasks)
        ]
        t0 = time.perf_counter()
        eps = run_episodes(lm, envs, [{"task_index": i} for i in range(tasks)], seed=0)
        row[f"selfsim {mode} episodes/s"] = len(eps) / (time.perf_counter() - t0)
    config = PPOConfig.from_flat(
        iterations=2, tasks_per_iter=max(2, tasks // 4), group_size=4, epochs=1, lora_rank=lora
    )
    trainer = PPOTrainer(config, lm)
    t0 = time.perf_counter()
    for _ in range(2):
        trainer.train_iteration()
    row["ppo s/iteration"] = (time.perf_counter() - t0) / 2
    sync()
    early, late, _ = turn_cost(16, 24, device)  # the default-size model, ten-turn episodes
    row["late/early turn (default size)"] = late / early
    real = round_time("ToolCall-v0", "off", 2, lm)
    row["rehearsed/real round ToolCall"] = round_time("ToolCall-v0", "replace", 2, lm) / real
    if device.startswith("cuda"):
        row["peak GPU memory GiB"] = torch.cuda.max_memory_allocated() / 2**30
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", default=None, help="model directory or Hub id (default: the shipped default)"
    )
    parser.add_argument("--tasks", type=int, default=16, help="episodes per SelfSim mode")
    parser.add_argument("--cpu-only", action="store_true", help="run only the CPU column (to try the script)")
    parser.add_argument(
        "--lora", type=int, default=0, help="PPO trains LoRA adapters of this rank (0: all weights)"
    )
    args = parser.parse_args()
    runs = [("cpu", "float32")]
    if torch.cuda.is_available() and not args.cpu_only:
        runs.insert(0, ("cuda", "bfloat16"))
        print(f"GPU: {torch.cuda.get_device_name()}")
    elif not args.cpu_only:
        print("no CUDA device: only the CPU column")
    rows = [check(args.model, device, dtype, args.tasks, args.lora) for device, dtype in runs]
    for key in rows[0]:
        cells = [
            f"{r.get(key, ''):.4g}" if isinstance(r.get(key), float) else str(r.get(key, "")) for r in rows
        ]
        ratio = ""
        if len(rows) == 2 and isinstance(rows[0].get(key), float) and isinstance(rows[1].get(key), float):
            ratio = f"  (x{rows[0][key] / rows[1][key]:.3g})"
        print(f"{key:>28}: " + " | ".join(cells) + ratio)


if __name__ == "__main__":
    main()
