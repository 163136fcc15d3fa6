"""SEED step 1, measured: what the analyst warm start costs the agent, and how good its skills are.

For each analyst (the cached warm start of `AnalystConfig()` by default, or one per `--variant`, or a
saved analyst model with `--analyst`): held-out success as agent on test tasks 0..N-1 per env (the warm
start's own success is the reference), and on `--episodes` train episodes per env that the analyst
samples itself (tasks 20000.., temperature 0.7; SEED analyses the policy's own episodes) the share of
its analyses that parse as a skill, that equal the explainer's label of the episode (`skills.label_skill`,
the analyst's training target), and that name the label's workflow (the text before "Rule:").

    python benchmarks/probes/analyst_quality.py --model DIR --out runs/analyst
    python benchmarks/probes/analyst_quality.py --model DIR --variant default lr=3e-4,oracle_fraction=1.0 --out runs/analyst
    python benchmarks/probes/analyst_quality.py --model DIR --analyst ~/.cache/rehearsal_gym/training/analyst-XXXX --eval-tasks 0

Writes OUT/analyst_quality.csv and .md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym

import rehearsal_gym  # noqa: F401  (registers the envs)
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.report import write_table
from rehearsal_gym.core.rollout import evaluate, run_episodes
from rehearsal_gym.training.analyst import AnalystConfig, analyse, analyst_config, load_or_train_analyst
from rehearsal_gym.training.skills import Skill, label_skill

ENVS = ("ToolCall-v0", "Finance-v0")


def parse_variant(text: str) -> AnalystConfig:
    """`lr=3e-4,oracle_fraction=1.0` -> AnalystConfig(lr=3e-4, oracle_fraction=1.0) (fields checked);
    `default` -> AnalystConfig()."""
    try:
        return analyst_config(text or "?")
    except ValueError as err:
        raise ValueError(f"--variant: {err}") from None


def skill_scores(skills: Sequence[Skill | None], labels: Sequence[Skill]) -> dict[str, float]:
    """Shares of analyses that parse, equal the label, and name the label's workflow."""
    n = max(len(labels), 1)

    def head(s: Skill) -> str:
        return s.to_json().split("Rule:")[0]

    return {
        "valid": sum(s is not None for s in skills) / n,
        "label_match": sum(
            s is not None and s.to_json() == lab.to_json() for s, lab in zip(skills, labels, strict=True)
        )
        / n,
        "workflow_match": sum(
            s is not None and head(s) == head(lab) for s, lab in zip(skills, labels, strict=True)
        )
        / n,
    }


def skill_quality(lm: LM, env_id: str, episodes: int) -> dict[str, float]:
    """`lm`'s analyses of its own sampled train episodes (as SEED analyses them), against the labels."""
    envs = [gym.make(env_id, split="train") for _ in range(episodes)]
    try:
        eps = run_episodes(
            lm,
            envs,
            [{"task_index": 20_000 + i} for i in range(episodes)],
            greedy=False,
            temperature=0.7,
            seed=1,
        )
        skills = analyse(lm, [e.unwrapped.task.prompt for e in envs], eps)
        labels = [
            label_skill(e.unwrapped.task, e.unwrapped.oracle_turns(), ep.actions, ep.infos)
            for e, ep in zip(envs, eps, strict=True)
        ]
    finally:
        for env in envs:
            env.close()
    return skill_scores(skills, labels)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the agent's warm start (a local model directory)")
    parser.add_argument(
        "--variant", nargs="*", default=[], help="AnalystConfig fields, e.g. lr=3e-4,steps=800"
    )
    parser.add_argument("--analyst", nargs="*", default=[], help="saved analyst model directories to score")
    parser.add_argument("--eval-tasks", type=int, default=1000, help="held-out tasks per env (0: skip)")
    parser.add_argument("--episodes", type=int, default=32, help="sampled train episodes analysed per env")
    parser.add_argument("--out", default="runs/analyst_quality")
    args = parser.parse_args(argv)
    if args.eval_tasks < 0 or args.episodes < 1:
        parser.error("--eval-tasks must be >= 0 and --episodes >= 1")
    try:
        variants = [(v, parse_variant(v)) for v in args.variant]
    except ValueError as err:
        parser.error(str(err))
    agent = LM.load(args.model)
    analysts: list[tuple[str, LM]] = [("warm start (no analyst)", agent)] if args.eval_tasks else []
    for path in args.analyst:
        analysts.append((f"analyst {Path(path).name}", LM.load(path)))
    for name, config in variants or ([] if args.analyst else [("default", AnalystConfig())]):
        print(f"analyst warm start {name}: {config}", file=sys.stderr)
        analysts.append((f"analyst {name}", load_or_train_analyst(LM.load(args.model), config)))
    rows = []
    for name, lm in analysts:
        row: dict[str, object] = {"model": name}
        for env_id in ENVS:
            if args.eval_tasks:
                row[f"{env_id} agent success"] = f"{evaluate(lm, env_id, args.eval_tasks)['success']:.1%}"
            if lm is not agent:
                for key, value in skill_quality(lm, env_id, args.episodes).items():
                    row[f"{env_id} skill {key}"] = f"{value:.0%}"
        rows.append(row)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    rows = [{c: r.get(c, "-") for c in columns} for r in rows]
    print(write_table(rows, Path(args.out), "analyst_quality"))
    print(f"written: {args.out}/analyst_quality.csv, {args.out}/analyst_quality.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
