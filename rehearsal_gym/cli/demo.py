"""`rehearsal-gym demo`: what the package does, in a few minutes on a laptop CPU.

1. Held-out success of the oracle, a random policy and the shipped default model on every family.
2. The swap: the same short PPO run from the same start, once in the real env and once in
   `SelfSim-v0` (tool results imagined by the model's environment role), both evaluated in the real
   env on the same held-out tasks, task by task (gained / lost, sign test).
3. The environment role's fidelity in one line.
4. Where shipped: the checkpoints of the longer runs behind docs/results.md, evaluated the same way.

Writes CSV, markdown and a PNG under ``--out``.
"""

from __future__ import annotations

import copy
import csv
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from rehearsal_gym.core.model import LM
from rehearsal_gym.core.report import comparison_rows, write_table
from rehearsal_gym.core.rollout import evaluate, random_turn, run_text_policy
from rehearsal_gym.defaults import ASSETS
from rehearsal_gym.envs import REAL_ENV_IDS

SHIPPED_RUNS = ASSETS / "runs"
"""Checkpoints of longer PPO runs from the shipped default, one folder each with a manifest.json."""


def ppo_configs(env: str, iterations: int, seed: int, **overrides: Any) -> dict[str, Any]:
    """The demo's two PPO runs: identical but for where tool results come from.

    The settings are those of docs/results.md's PPO tables (sampling at temperature 0.7,
    successes only reinforced, 16 tasks x 8 samples a round); rehearsed runs imagine every tool
    result with the frozen start model (its environment role) and train the agent role only.
    `overrides`: other PPOConfig fields, for both runs."""
    from rehearsal_gym.agents.config import PPOConfig

    real = (
        dict(  # the settings of docs/results.md's PPO table
            env=env,
            iterations=iterations,
            tasks_per_iter=16,
            group_size=8,
            minibatch_size=32,
            lr=1e-4,
            temperature=0.7,
            negative_weight=0.0,
            seed=seed,
        )
        | overrides
    )
    rehearsed = dict(
        real,
        rehearse="replace",
        rehearsal_verifier="consistent",
        rehearsal_world="frozen",
        train_env_role=False,
    )
    return {"real": PPOConfig.from_flat(**real), "rehearsed": PPOConfig.from_flat(**rehearsed)}


def oracle_policy():
    """The env's scripted expert as a text policy."""
    state: dict = {}

    def act(env, obs):
        base = env.unwrapped
        if state.get("task") is not base.task:
            state.update(task=base.task, turns=iter(base.oracle_turns()))
        return next(state["turns"])

    return act


def random_policy(seed: int):
    """Random well-formed turns (a random tool with schema-typed arguments, or an answer)."""
    rng = np.random.default_rng(seed)
    return lambda env, obs: random_turn(env.unwrapped.tools, rng)


def heldout_rows(lm: LM | None, envs, tasks: int, seed: int, progress: bool) -> list[dict[str, object]]:
    """Held-out success of oracle, random policy and `lm` on tasks 0..tasks-1 of each family."""
    rows = []
    bar = tqdm(total=len(envs) * tasks * (3 if lm else 2), desc="held-out tasks", disable=not progress)
    for env_id in envs:
        env = gym.make(env_id, split="test")
        row: dict[str, object] = {"env": env_id, "tasks": tasks}
        row["oracle"] = run_text_policy(env, oracle_policy(), tasks)
        bar.update(tasks)
        row["random"] = run_text_policy(env, random_policy(seed), tasks)
        bar.update(tasks)
        if lm is not None:
            row["default model"] = evaluate(lm, env_id, tasks, progress=bar.update)["success"]
        rows.append(row)
    bar.close()
    return rows


def _evaluate(lm: LM, env: str, tasks: int, label: str, progress: bool) -> dict[str, Any]:
    with tqdm(total=tasks, desc=f"eval {label}", disable=not progress) as bar:
        return evaluate(lm, env, tasks, progress=bar.update)


def shipped_runs(env: str) -> list[tuple[dict[str, Any], Path]]:
    """(manifest, model dir) of each shipped long run on `env`, real first."""
    runs = []
    for path in sorted(SHIPPED_RUNS.glob("*/manifest.json")) if SHIPPED_RUNS.is_dir() else []:
        manifest = json.loads(path.read_text())
        if manifest.get("env") == env and (path.parent / "config.json").is_file():
            runs.append((manifest, path.parent))
    return sorted(runs, key=lambda r: r[0].get("setting") != "real")


def plot_swap(rows: list[dict[str, object]], path: Path, title: str) -> None:
    """Bar chart of held-out success per model, the start first, with gained / lost on each bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [str(r["model"]) for r in rows]
    values = [100 * float(r["success"]) for r in rows]
    colors = ["#999999" if "start" in n else "#1f77b4" if "real" in n else "#ff7f0e" for n in names]
    fig, ax = plt.subplots(figsize=(8.5, 3.8))
    bars = ax.barh(range(len(rows)), values, color=colors)
    for bar, row in zip(bars, rows, strict=True):
        note = f"{bar.get_width():.1f}%"
        if row["gained"] or row["lost"]:
            note += f"  (+{row['gained']} / -{row['lost']}, p {row['p']})"
        ax.text(bar.get_width() + 0.3, bar.get_y() + bar.get_height() / 2, note, va="center", fontsize=8)
    low = max(0.0, 5 * (min(values) // 5) - 10)
    ax.set(xlim=(low, 100 + (100 - low) * 0.45), yticks=range(len(rows)), yticklabels=names)
    ax.set_xticks([t for t in range(0, 101, 5) if t >= low])
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("held-out success in the real env (%)")
    ax.invert_yaxis()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_demo(
    lm: LM,
    *,
    model_name: str,
    envs=REAL_ENV_IDS,
    tasks: int = 100,
    swap_env: str = "ToolCall-v0",
    iterations: int = 3,
    eval_tasks: int = 500,
    fidelity_tasks: int = 16,
    seed: int = 0,
    out: str | Path = "runs/demo",
    progress: bool = True,
    ppo_overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole demo (module docstring); prints as it goes and returns the tables it wrote.
    `ppo_overrides`: PPOConfig fields that replace the demo's (both runs; e.g. a smaller round)."""
    from rehearsal_gym.agents.train import train
    from rehearsal_gym.rehearsal.fidelity import measure_fidelity

    out, t0 = Path(out), time.time()
    print(
        "rehearsal-gym: real tool environments, and the model's own imagination of them (SelfSim-v0) as a\n"
        f"training environment. Model: {model_name} ({lm.num_parameters():,} parameters).\n"
    )
    print(f"[1/4] Held-out success on {tasks} test-split tasks per family")
    rows = heldout_rows(lm, envs, tasks, seed, progress)
    print(write_table(rows, out, "heldout"))
    print(
        "oracle = the scripted expert (the verifier's ceiling); random = well-formed random calls.\n"
        "A task succeeds only if the backend ends in the expected state and the answer is right.\n"
    )

    configs = ppo_configs(swap_env, iterations, seed, **(ppo_overrides or {}))
    real = configs["real"]
    print(
        f"[2/4] The swap on {swap_env}: {iterations} PPO iterations of {real.tasks_per_iter} tasks x "
        f"{real.group_size} samples from the same start, once in the real env and once in SelfSim-v0 "
        "(every tool result imagined by the start model's environment role); the only difference is "
        "PPOConfig.rehearse. Both are evaluated in the real env on the same held-out tasks."
    )
    before = _evaluate(lm, swap_env, eval_tasks, "start", progress)
    results: dict[str, dict[str, Any]] = {"start (shipped default)": before}
    seconds = {}
    for setting, config in configs.items():
        policy = lm.with_model(copy.deepcopy(lm.model))
        t = time.time()
        train(
            config,
            policy,
            out / f"ppo-{setting}",
            eval_tasks=eval_tasks,
            before=before,
            progress=progress,
            log=lambda _: None,
        )
        seconds[setting] = time.time() - t
        results[f"live PPO {setting}"] = json.loads((out / f"ppo-{setting}" / "after.json").read_text())
        with open(out / f"ppo-{setting}" / "progress.csv") as f:
            curve = [float(row["charts/success"]) for row in csv.DictReader(f)]
        print(
            f"  {setting:>9}: {seconds[setting]:.0f} s; success of the sampled train episodes per iteration "
            + " -> ".join(f"{v:.2f}" for v in curve)
        )

    print(
        f"\n[3/4] Fidelity of the environment role on {fidelity_tasks} held-out {swap_env} tasks (wrap mode)"
    )
    (fid,) = measure_fidelity(lm, swap_env, fidelity_tasks, temperature=real.ppo.temperature)
    print(
        f"it imagined {fid['imagined calls']} tool results: {1 - fid['invalid results']:.0%} usable, "
        f"{fid['field accuracy']:.0%} of fields equal to the real tool's, {fid['exact match']:.0%} exactly equal; "
        f"agent success {fid['success in rehearsal, consistent verifier']:.0%} in rehearsal vs "
        f"{fid['success in real env']:.0%} in the real env.\n"
        "The world writes well-formed results of the right shape, but cannot know hidden values: rehearsal\n"
        "trains the agent to act on what it is shown, scored in the world it saw (consistent verifier).\n"
    )

    runs = shipped_runs(swap_env)
    print(f"[4/4] Shipped checkpoints of the longer runs behind docs/results.md ({len(runs)} on {swap_env})")
    for manifest, path in runs:
        label = f"shipped PPO {manifest['setting']} ({manifest['iterations']} it., seed {manifest['seed']})"
        results[label] = _evaluate(LM.load(path), swap_env, eval_tasks, label, progress)
    swap = comparison_rows(results)
    table = [{k: r[k] for k in ("model", "success", "gained", "lost", "p")} for r in swap]
    print(f"\n{swap_env}, held-out tasks 0..{eval_tasks - 1}, each model against the start:\n")
    print(write_table(table, out, "swap"))
    plot_swap(table, out / "swap.png", f"{swap_env}: PPO in the real env vs in SelfSim-v0 (rehearsed)")
    print(
        "\ngained / lost: tasks that flipped from fail to success and back; p: exact sign test, the chance\n"
        f"of a split this uneven if training changed nothing. {iterations} live iterations are too few to expect\n"
        "a significant change: they show the mechanics. The shipped runs are longer runs from the same start,\n"
        "made by the commands below; one seed is one draw, so each prints what other seeds gave:"
    )
    for manifest, _ in runs:
        print(
            f"shipped {manifest['setting']} run: {manifest['command']}\n  over seeds: {manifest['over_seeds']}"
        )
    print(
        f"\nwritten: {out}/heldout.csv|md, {out}/swap.csv|md, {out}/swap.png, {out}/ppo-*/ "
        f"(learning_curve.png, progress.csv)\ndemo took {time.time() - t0:.0f} s"
    )
    return {"heldout": rows, "swap": table, "seconds": time.time() - t0}
