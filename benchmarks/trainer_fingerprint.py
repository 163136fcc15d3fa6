"""Seeded PPO fingerprint: the losses of a few short runs from the shipped default, to compare the trainer before and after a
refactor. Same machine, same library versions: the two JSON files must be equal (or differ only where
a named bug fix says so).

    python benchmarks/trainer_fingerprint.py --out /tmp/before.json
    # ...change the trainer...
    python benchmarks/trainer_fingerprint.py --out /tmp/after.json --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch

import rehearsal_gym  # noqa: F401 - registers the env ids
from rehearsal_gym import LM, default_lm

TINY = dict(iterations=2, tasks_per_iter=2, group_size=3, epochs=2, minibatch_size=4, max_turns=3, lr=1e-3)
# each run: flat PPO options on top of TINY (the CLI's flag names)
RUNS = {
    "group": dict(kl_coef=0.05, ent_coef=0.01),
    "gae": dict(advantage="gae", ent_coef=0.01, negative_weight=0.5),
    "replace-env-role": dict(
        env="Retail-v0", rehearse="replace", group_minibatches=True, scale_advantages=True
    ),
    "wrap-grounding": dict(rehearse="wrap", grounding_coef=0.5, train_env_role=True, kl_clamp=5.0),
    "skill-hints": dict(env="Finance-v0", skill_hints=True, lambda_opd=0.5, loss_reduction="sequence"),
    "curriculum-frozen": dict(
        rehearse="replace",
        rehearsal_world="frozen",
        train_env_role=False,
        task_sampling="template-variance",
        target_kl=0.02,
        warmup_iterations=1,
    ),
}


def make_config(options: dict):
    from rehearsal_gym.agents import PPOConfig

    if hasattr(PPOConfig, "from_flat"):
        return PPOConfig.from_flat(**options)
    return PPOConfig(**options)


def fingerprint() -> dict[str, list[dict[str, float]]]:
    from rehearsal_gym.agents import PPOTrainer

    torch.set_num_threads(1)
    base = default_lm()  # the shipped default calls tools, so both roles have tokens
    out = {}
    for name, options in RUNS.items():
        import copy

        lm = LM(copy.deepcopy(base.model), base.tokenizer)
        trainer = PPOTrainer(make_config({**TINY, **options}), lm)
        try:
            out[name] = [trainer.train_iteration() for _ in range(2)]
        finally:
            trainer.close()
    return out


def _same(a, b) -> bool:
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--compare", default=None, help="an earlier fingerprint to compare with")
    args = parser.parse_args()
    rows = fingerprint()
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1, sort_keys=True)
    if not args.compare:
        return 0
    with open(args.compare) as f:
        ref = json.load(f)
    diffs = []
    for name in ref:
        for i, (a, b) in enumerate(zip(ref[name], rows.get(name, []), strict=False)):
            for key in sorted(set(a) | set(b)):
                if not _same(a.get(key), b.get(key)):
                    diffs.append(f"{name} iteration {i + 1} {key}: {a.get(key)} -> {b.get(key)}")
    print("\n".join(diffs) or f"identical: {len(ref)} runs")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
