"""The training job: evaluate, train with PPO (real or rehearsed), evaluate again, write results.

Writes to `out`: checkpoint/ (atomic, resumable), progress.csv, learning_curve.png, TensorBoard
scalars under tb/, and result.json with held-out success before and after.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from rehearsal_gym.core.atomic import recover
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.report import paired_sign_test, plot_curve
from rehearsal_gym.core.rollout import evaluate

from .ppo import PPOConfig, PPOTrainer

if TYPE_CHECKING:
    from rehearsal_gym.training.analyst import AnalystConfig


def train(
    config: PPOConfig,
    lm: LM,
    out: str | Path,
    *,
    eval_tasks: int = 100,
    resume: bool = False,
    progress: bool = True,
    log=print,
    analyst: AnalystConfig | None = None,
    before: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run PPO for `config.iterations` rounds; held-out success (real env) before and after.

    With `config.skills.seed_distill` the model first takes SEED's analyst warm start under `analyst`
    (default `AnalystConfig()`; cached per weights and config). `before`: an evaluation of `lm`
    on the same `eval_tasks` made already (`rollout.evaluate`), reused instead of run again."""
    out = Path(out)
    ckpt = recover(out / "checkpoint")
    if resume and (ckpt / "trainer_state.json").is_file():
        trainer = PPOTrainer.load(ckpt)
        log(f"resumed from {ckpt} at iteration {trainer.iteration}")
        before = json.loads((out / "before.json").read_text())
    else:
        if config.skills.seed_distill:  # SEED step 1: teach the policy to analyse its own episodes
            from rehearsal_gym.training.analyst import load_or_train_analyst

            lm = load_or_train_analyst(lm, analyst, progress=progress, log=log)
        trainer = PPOTrainer(config, lm)
        if before is None or config.skills.seed_distill:  # SEED's start is the analyst, not `lm`
            before = evaluate(trainer.lm, config.env, eval_tasks)
        elif before.get("env") != config.env or before.get("n") != eval_tasks or before.get("first_task", 0):
            raise ValueError(
                f"before= must be an evaluation of {eval_tasks} tasks of {config.env} from task 0, "
                f"got {before.get('n')} tasks of {before.get('env')} from {before.get('first_task')}"
            )
        out.mkdir(parents=True, exist_ok=True)
        (out / "before.json").write_text(json.dumps(before))
    log(f"{config.env}: held-out success before PPO {before['success']:.1%} ({before['n']} tasks)")
    writer = _tensorboard(out / "tb")
    bar = tqdm(
        range(trainer.iteration, config.iterations),
        desc=f"ppo {config.env} rehearse={config.rehearsal.rehearse}",
        disable=not progress,
        initial=trainer.iteration,
        total=config.iterations,
    )
    try:
        for _ in bar:
            row = trainer.train_iteration()
            trainer.save(ckpt)  # atomic: a kill leaves the previous complete checkpoint
            bar.set_postfix(success=f"{row['charts/success']:.2f}", kl=f"{row['losses/approx_kl_ref']:.4f}")
            if writer is not None:
                for key, value in row.items():
                    if key != "iteration":
                        writer.add_scalar(key, value, row["iteration"])
    finally:
        trainer.close()
        if writer is not None:
            writer.close()
    after = evaluate(trainer.lm, config.env, eval_tasks)
    log(f"{config.env}: held-out success after PPO {after['success']:.1%} ({after['n']} tasks)")
    (out / "after.json").write_text(json.dumps(after))
    _write_progress(trainer.history, out)
    result = {
        "env": config.env,
        "rehearse": config.rehearsal.rehearse,
        "before": before["success"],
        "after": after["success"],
        "tasks": after["n"],
        "iterations": trainer.iteration,
        "seed": config.seed,
    }
    if "outcomes" in before:  # same tasks before and after: which ones changed, and is it chance?
        result.update(paired_sign_test(before["outcomes"], after["outcomes"]))
    (out / "result.json").write_text(json.dumps(result, indent=2))
    trainer.lm.save(out / "final_model")
    return result


def _write_progress(history: list[dict[str, float]], out: Path) -> None:
    if not history:
        return
    with open(out / "progress.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(history[0]))
        writer.writeheader()
        writer.writerows(history)
    plot_curve(
        [h["charts/success"] for h in history],
        out / "learning_curve.png",
        "PPO: success of sampled train episodes",
        "success",
        smooth=5,
        xlabel="PPO iteration",
    )


def _tensorboard(path: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(path))
