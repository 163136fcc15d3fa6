"""Command line: ``rehearsal-gym demo | warmstart | eval | fidelity | rehearse | train``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from .defaults import REAL_ENV_IDS

# the demo's PPO run (see README "Measured results" for how these were chosen)
DEMO_PPO = {
    "env": "ToolCall-v0",
    "iterations": 30,
    "tasks_per_iter": 16,
    "group_size": 8,
    "minibatch_size": 32,
    "lr": 1e-4,
    "temperature": 0.7,
    "negative_weight": 0.0,
}


def _oracle_policy():
    state: dict = {}

    def act(env, obs):
        base = env.unwrapped
        if state.get("task") is not base.task:
            state.update(task=base.task, turns=iter(base.oracle_turns()))
        return next(state["turns"])

    return act


def _random_policy(seed: int):
    from .rollout import random_turn

    rng = np.random.default_rng(seed)
    return lambda env, obs: random_turn(env.unwrapped.tools, rng)


def _warm_config(**overrides):
    """WarmStartConfig with the CLI options that were given (None keeps the default)."""
    from .warmstart import WarmStartConfig

    return WarmStartConfig(**{k: v for k, v in overrides.items() if v is not None})


def _model(args: argparse.Namespace):
    """The model of --model (a local directory), else the cached warm start (trained if missing)."""
    from .model import LM
    from .warmstart import load_or_train

    if getattr(args, "model", None):
        return LM.load(args.model)
    return load_or_train(_warm_config(steps=getattr(args, "steps", None)), progress=not args.quiet)


def cmd_demo(args: argparse.Namespace) -> int:
    """Oracle, random policy and the warm-started default model on held-out tasks, then a short PPO run."""
    from .report import write_table
    from .rollout import evaluate, run_text_policy

    lm = None if args.no_model else _model(args)
    rows = []
    for env_id in args.envs:
        env = gym.make(env_id, split="test")
        row: dict[str, object] = {"env": env_id, "tasks": args.tasks}
        row["oracle"] = run_text_policy(env, _oracle_policy(), args.tasks)
        row["random"] = run_text_policy(env, _random_policy(args.seed), args.tasks)
        if lm is not None:
            row["warm-start model"] = evaluate(lm, env_id, args.tasks)["success"]
        rows.append(row)
    print("\nHeld-out (test split) success rate\n")
    print(write_table(rows, Path(args.out), "demo"))
    print(f"\nwritten: {args.out}/demo.csv, {args.out}/demo.md")
    if lm is not None and args.ppo_iterations > 0:
        _demo_ppo(lm, args)
    return 0


def _demo_ppo(lm, args: argparse.Namespace) -> None:
    """The short PPO run of the demo: warm start -> PPO in the real env, held-out before/after."""
    from .agents.ppo import PPOConfig
    from .agents.train import train

    config = PPOConfig(
        **{**DEMO_PPO, "env": args.ppo_env, "iterations": args.ppo_iterations, "seed": args.seed}
    )
    out = Path(args.out) / "ppo"
    print(
        f"\nPPO on {config.env} ({config.iterations} iterations of {config.tasks_per_iter} tasks x "
        f"{config.group_size} samples, lr {config.lr:g}, temperature {config.temperature:g})\n"
    )
    result = train(config, lm, out, eval_tasks=args.ppo_eval_tasks, progress=not args.quiet)
    print(
        f"\n{config.env} held-out success: warm start {result['before']:.1%} -> after PPO {result['after']:.1%}"
        f" ({result['tasks']} tasks)"
    )
    print(
        f"the same tasks, one by one: {result['gained']} gained, {result['lost']} lost "
        f"(sign test p = {result['p_value']:.3f}: the chance of a split this uneven if PPO changed nothing)"
    )
    print(f"written: {out}/progress.csv, {out}/learning_curve.png, {out}/result.json, {out}/tb/")


def _warmstart_command_config(args: argparse.Namespace):
    """The WarmStartConfig of `rehearsal-gym warmstart`'s options (None keeps a default)."""
    return _warm_config(
        steps=args.steps,
        tasks_per_env=args.tasks_per_env,
        seed=args.seed,
        polish_steps=args.polish_steps,
        polish_tasks_per_env=args.polish_tasks_per_env,
        polish_envs=tuple(args.polish_envs) if args.polish_envs else None,
        polish_env_tasks=tuple(args.polish_env_tasks) if args.polish_env_tasks else None,
    )


def cmd_warmstart(args: argparse.Namespace) -> int:
    """Train the warm start (replacing its cache) and report held-out success per family."""
    from .report import plot_curve, write_table
    from .rollout import evaluate
    from .warmstart import polish_cached_main_phase, save_warm_start, train_warm_start, warm_start_path

    config = _warmstart_command_config(args)
    if args.reuse_main_phase and not config.polish_steps:
        print(
            "error: --reuse-main-phase needs --polish-steps > 0 (there is no polish to run)", file=sys.stderr
        )
        return 2
    out = Path(args.out)
    t0 = time.time()
    if args.reuse_main_phase:
        lm, losses = polish_cached_main_phase(config, progress=not args.quiet)
    else:
        lm, losses = train_warm_start(config, progress=not args.quiet)
    save_warm_start(lm, losses, warm_start_path(config))
    train_s = time.time() - t0
    print(f"warm start saved: {warm_start_path(config)} (pass it as --model DIR to train / eval)")
    title = f"warm start: copy drills to step {config.drill_steps}, then episodes of both roles"
    if config.polish_steps:
        title += f", polish from step {config.drill_steps + config.steps}"
    plot_curve(losses, out / "warmstart_loss.png", title, "masked NLL")
    rows = []
    for env_id in REAL_ENV_IDS:
        result = evaluate(lm, env_id, args.eval_tasks)
        rows.append({"env": env_id, "held-out tasks": result["n"], "success": result["success"]})
        print(
            f"{env_id}: {result['success']:.1%} of {result['n']} held-out tasks; per template {result['per_template']}"
        )
    polish = f" + {config.polish_steps} polish steps" if config.polish_steps else ""
    print(
        f"\nwarm start: {config.steps} steps{polish} in {train_s:.0f}s, final loss {np.mean(losses[-20:]):.3f}\n"
    )
    print(write_table(rows, out, "warmstart"))
    (out / "warmstart_config.json").write_text(json.dumps({"key": config.key(), "steps": config.steps}))
    print(f"\nwritten: {out}/warmstart.csv, {out}/warmstart.md, {out}/warmstart_loss.png")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """Held-out success of models as agent in the real envs, side by side on the same tasks: each
    model's tasks gained and lost against the first, with a sign test."""
    from .model import LM
    from .report import comparison_rows, write_table
    from .rollout import evaluate
    from .warmstart import load_or_train

    if args.tasks < 1:
        raise SystemExit(f"--tasks must be >= 1, got {args.tasks}")
    if args.first_task < 0:
        raise SystemExit(f"--first-task must be >= 0, got {args.first_task}")
    if args.drills < 0:
        raise SystemExit(f"--drills must be >= 0, got {args.drills}")
    if args.recall < 0:
        raise SystemExit(f"--recall must be >= 0, got {args.recall}")
    paths: dict[str, str] = {}
    for spec in args.model:
        # NAME=PATH, unless the whole argument is an existing path (a directory name may hold "=")
        name, path = spec.split("=", 1) if "=" in spec and not Path(spec).exists() else (spec, spec)
        if name in paths:
            raise SystemExit(f"--model names {name!r} twice")
        paths[name] = path
    models = {}
    for name, path in paths.items():
        try:
            models[name] = (
                load_or_train(_warm_config(), progress=not args.quiet)
                if path == "warm-start"
                else LM.load(path)
            )
        except (FileNotFoundError, OSError) as e:
            raise SystemExit(f"--model {name}: {e}") from None
    for env_id in args.envs:
        results = {}
        for name, lm in models.items():
            results[name] = evaluate(lm, env_id, args.tasks, first_task=args.first_task)
            print(f"{env_id} {name}: {results[name]['success']:.1%} of {results[name]['n']}", flush=True)
        last = args.first_task + args.tasks - 1
        print(
            f"\n{env_id}, held-out tasks {args.first_task}..{last} (gained / lost: against {next(iter(models))})\n"
        )
        print(write_table(comparison_rows(results), Path(args.out), f"eval_{env_id}"))
    written = f"{args.out}/eval_<env>.csv, {args.out}/eval_<env>.md"
    if args.drills:
        print(f"\ncopy drills ({args.drills} of each kind per env, values drawn afresh; greedy, exact):\n")
        print(write_table(_drill_rows(models, args.envs, args.drills), Path(args.out), "eval_drills"))
        written += f", {args.out}/eval_drills.md"
    if args.recall:
        last = args.first_task + args.recall - 1
        print(
            f"\nrecall (oracle transcripts of held-out tasks {args.first_task}..{last}, teacher-forced: values "
            "an agent turn copies from the request or only from a tool result, greedy-exact):\n"
        )
        rows = _recall_rows(models, args.envs, range(args.first_task, last + 1))
        print(write_table(rows, Path(args.out), "eval_recall"))
        written += f", {args.out}/eval_recall.md"
    print(f"\nwritten: {written}")
    return 0


def _drill_rows(models: dict, env_ids, n: int) -> list[dict]:
    """Per model and env: the share of fresh repeat and lookup drills solved (a copying-skill probe)."""
    import numpy as np

    from .demos import DRILL_KINDS, copy_drills, record_oracle_episodes
    from .warmstart import drill_accuracy

    rows = []
    for env_id in env_ids:
        demos = record_oracle_episodes(env_id, range(200))
        for name, lm in models.items():
            row = {"model": name, "env": env_id}
            for kind in DRILL_KINDS:  # the same drills for every model: one seed per env and kind
                drills = copy_drills(lm, demos, n, np.random.default_rng(12345), kinds=(kind,))
                row[kind] = f"{drill_accuracy(lm, drills):.1%}"
            rows.append(row)
    return rows


def _recall_rows(models: dict, env_ids, tasks: range) -> list[dict]:
    """Per model, env and template: the share of copied values right, by where they were shown."""
    from .demos import record_oracle_episodes
    from .recall import SOURCES, recall_counts

    rows = []
    for env_id in env_ids:
        demos = record_oracle_episodes(env_id, tasks, split="test")
        for name, lm in models.items():
            counts = recall_counts(lm, demos)
            for template in sorted({t for t, _ in counts}):
                row = {"model": name, "env": env_id, "template": template}
                for source in SOURCES:
                    right, n = counts.get((template, source), (0, 0))
                    row[f"from {source}"] = f"{right / n:.1%} ({right}/{n})" if n else "-"
                rows.append(row)
    return rows


def cmd_fidelity(args: argparse.Namespace) -> int:
    """Fidelity of imagined tool results and the rehearsal gap, per family (SelfSimEnv wrap mode)."""
    from .fidelity import measure_fidelity
    from .report import write_table

    lm = _model(args)
    rows = [
        row
        for env_id in args.envs
        for row in measure_fidelity(
            lm, env_id, args.tasks, temperature=args.world_temperature, by_template=args.by_template
        )
    ]
    print("\nEnvironment-role fidelity on held-out tasks (rates; gap = rehearsal - real success)\n")
    print(write_table(rows, Path(args.out), "fidelity"))
    print(f"\nwritten: {args.out}/fidelity.csv, {args.out}/fidelity.md")
    return 0


def cmd_ground_world(args: argparse.Namespace) -> int:
    """Ground a frozen world on real tool results (environment role only); train --world-model uses it."""
    from .warmstart import ground_world

    out = Path(args.out)
    if (out / "config.json").is_file() and not args.overwrite:
        raise ValueError(f"{out} already holds a model; pass --overwrite to replace it")
    if args.first_task < 0:
        raise ValueError(f"--first-task must be >= 0, got {args.first_task}")
    lm = _model(args)
    tasks = range(args.first_task, args.first_task + args.tasks)
    losses = ground_world(
        lm, args.envs, tasks, args.steps, lr=args.lr, seed=args.seed, progress=not args.quiet
    )
    lm.save(out)  # atomic: all or nothing
    (out / "ground_world.json").write_text(
        json.dumps(
            {
                "envs": args.envs,
                "tasks": [tasks.start, tasks.stop],
                "steps": args.steps,
                "lr": args.lr,
                "seed": args.seed,
                "losses": losses,
            }
        )
    )
    first, last = np.mean(losses[:20]), np.mean(losses[-20:])
    print(f"grounded world written to {out} (environment-role loss {first:.3f} -> {last:.3f})")
    return 0


def cmd_rehearse(args: argparse.Namespace) -> int:
    """Held-out success with private rehearsal budgets N (rehearsed candidates per real action)."""
    from .planner import RehearsalConfig, planner_success
    from .report import write_table

    lm = _model(args)
    rows = []
    for env_id in args.envs:
        row: dict[str, object] = {"env": env_id, "tasks": args.tasks}
        for n in args.budgets:
            config = RehearsalConfig(n=n, horizon=args.horizon, sequential=args.sequential)
            result = planner_success(lm, env_id, args.tasks, config)
            row[f"N={n}"] = result["success"]
            print(f"{env_id} N={n}: {result['success']:.1%} ({result['rehearsals']} rehearsals)", flush=True)
        rows.append(row)
    print(f"\nHeld-out success with private rehearsal ({'sequential' if args.sequential else 'parallel'})\n")
    print(write_table(rows, Path(args.out), "rehearsal"))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """PPO on the warm-started default (or --model), real or rehearsed; held-out success before/after."""
    from .agents.ppo import PPOConfig
    from .agents.train import train
    from .analyst import analyst_config

    config = PPOConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(PPOConfig)})
    analyst = analyst_config(args.analyst_config)  # checked before the model loads
    if args.analyst_config and not config.seed_distill:
        raise ValueError("--analyst-config configures SEED's analyst warm start: it needs --seed-distill")
    result = train(
        config,
        _model(args),
        args.out,
        eval_tasks=args.eval_tasks,
        resume=args.resume,
        progress=not args.quiet,
        analyst=analyst,
    )
    print(json.dumps(result, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rehearsal-gym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help=cmd_demo.__doc__)
    demo.add_argument("--envs", nargs="+", default=list(REAL_ENV_IDS), choices=REAL_ENV_IDS)
    demo.add_argument("--tasks", type=int, default=100, help="held-out tasks per env")
    demo.add_argument("--steps", type=int, default=None, help="warm-start steps (default: WarmStartConfig)")
    demo.add_argument("--no-model", action="store_true", help="only oracle and random policy")
    demo.add_argument("--ppo-env", default=DEMO_PPO["env"], choices=REAL_ENV_IDS, help="env of the PPO run")
    demo.add_argument(
        "--ppo-iterations", type=int, default=DEMO_PPO["iterations"], help="PPO iterations (0 skips PPO)"
    )
    demo.add_argument(
        "--ppo-eval-tasks",
        type=int,
        default=1000,
        help="held-out tasks before and after PPO (the paired test conditions on them: use many)",
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--out", default="runs/demo")
    demo.add_argument("--quiet", action="store_true")
    demo.set_defaults(func=cmd_demo)
    ws = sub.add_parser("warmstart", help=cmd_warmstart.__doc__)
    ws.add_argument("--steps", type=int, default=None)
    ws.add_argument("--tasks-per-env", type=int, default=None)
    ws.add_argument(
        "--polish-steps",
        type=int,
        default=None,
        help="steps on fresh demos of both roles after the main phase (0: none)",
    )
    ws.add_argument(
        "--polish-tasks-per-env",
        type=int,
        default=None,
        help="fresh train tasks per env whose oracle demos the polish trains on",
    )
    ws.add_argument(
        "--polish-envs",
        nargs="+",
        choices=REAL_ENV_IDS,
        default=None,
        help="envs whose fresh demos the polish trains on (default: all)",
    )
    ws.add_argument(
        "--polish-env-tasks",
        nargs="+",
        type=int,
        default=None,
        metavar="N",
        help="fresh tasks of each polish env, in the order of --polish-envs (or all envs): "
        "a family's share of the polish (default: --polish-tasks-per-env each)",
    )
    ws.add_argument(
        "--reuse-main-phase",
        action="store_true",
        help="start the polish from the cached main phase (the --polish-steps 0 warm start; "
        "trained and cached first if absent): the same weights, about half the time",
    )
    ws.add_argument("--eval-tasks", type=int, default=100)
    ws.add_argument("--seed", type=int, default=0)
    ws.add_argument("--out", default="runs/warmstart")
    ws.add_argument("--quiet", action="store_true")
    ws.set_defaults(func=cmd_warmstart)
    ev = sub.add_parser("eval", help=cmd_eval.__doc__)
    ev.add_argument(
        "--model",
        nargs="+",
        required=True,
        help="local Hugging Face model directories or warm-start (the cached warm start), each optionally "
        "NAME=PATH; the first is the baseline",
    )
    ev.add_argument("--envs", nargs="+", default=list(REAL_ENV_IDS), choices=REAL_ENV_IDS)
    ev.add_argument("--tasks", type=int, default=100)
    ev.add_argument("--first-task", type=int, default=0, help="index of the first held-out task")
    ev.add_argument(
        "--drills", type=int, default=0, help="also probe copying: N fresh repeat and N lookup drills per env"
    )
    ev.add_argument(
        "--recall",
        type=int,
        default=0,
        help="also probe recall: values copied from the request / a tool result in N oracle transcripts",
    )
    ev.add_argument("--out", default="runs/eval")
    ev.add_argument("--quiet", action="store_true")
    ev.set_defaults(func=cmd_eval)
    fi = sub.add_parser("fidelity", help=cmd_fidelity.__doc__)
    fi.add_argument("--model", default=None, help="local model directory (default: the cached warm start)")
    fi.add_argument("--envs", nargs="+", default=list(REAL_ENV_IDS), choices=REAL_ENV_IDS)
    fi.add_argument("--tasks", type=int, default=50)
    fi.add_argument("--out", default="runs/fidelity")
    fi.add_argument(
        "--world-temperature", type=float, default=1.0, help="environment-role sampling temperature"
    )
    fi.add_argument("--by-template", action="store_true", help="also one row per task template")
    fi.add_argument("--quiet", action="store_true")
    fi.set_defaults(func=cmd_fidelity)
    gw = sub.add_parser("ground-world", help=cmd_ground_world.__doc__)
    gw.add_argument("--model", default=None, help="local model directory (default: the cached warm start)")
    gw.add_argument("--envs", nargs="+", default=["ToolCall-v0"], choices=REAL_ENV_IDS)
    gw.add_argument("--first-task", type=int, default=10000, help="first train task of the real results")
    gw.add_argument("--tasks", type=int, default=2000, help="train tasks per env (oracle runs)")
    gw.add_argument("--steps", type=int, default=300)
    gw.add_argument("--lr", type=float, default=3e-4)
    gw.add_argument("--seed", type=int, default=0)
    gw.add_argument("--out", required=True, help="directory of the grounded world model")
    gw.add_argument("--overwrite", action="store_true")
    gw.add_argument("--quiet", action="store_true")
    gw.set_defaults(func=cmd_ground_world)
    re_ = sub.add_parser("rehearse", help=cmd_rehearse.__doc__)
    re_.add_argument("--model", default=None, help="local model directory (default: the cached warm start)")
    re_.add_argument("--envs", nargs="+", default=list(REAL_ENV_IDS), choices=REAL_ENV_IDS)
    re_.add_argument("--budgets", nargs="+", type=int, default=[0, 2, 4])
    re_.add_argument("--horizon", type=int, default=3)
    re_.add_argument("--sequential", action="store_true")
    re_.add_argument("--tasks", type=int, default=30)
    re_.add_argument("--out", default="runs/rehearsal")
    re_.add_argument("--quiet", action="store_true")
    re_.set_defaults(func=cmd_rehearse)
    tr = sub.add_parser("train", help=cmd_train.__doc__)
    from .agents.curriculum import TASK_SAMPLINGS
    from .agents.losses import REDUCTIONS
    from .agents.ppo import ADVANTAGES, REHEARSAL_WORLDS, REHEARSE_MODES, PPOConfig
    from .selfsim import VERIFIERS

    choices = {
        "env": REAL_ENV_IDS,
        "rehearse": REHEARSE_MODES,
        "rehearsal_verifier": VERIFIERS,
        "rehearsal_world": REHEARSAL_WORLDS,
        "advantage": ADVANTAGES,
        "loss_reduction": REDUCTIONS,
        "task_sampling": TASK_SAMPLINGS,
    }
    for f in dataclasses.fields(PPOConfig):  # the CLI mirrors PPOConfig one-to-one
        flag = "--" + f.name.replace("_", "-")
        if isinstance(f.default, bool):
            tr.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            tr.add_argument(flag, type=type(f.default), default=f.default, choices=choices.get(f.name))
    tr.add_argument("--model", default=None, help="local model directory (default: the cached warm start)")
    tr.add_argument("--eval-tasks", type=int, default=100)
    tr.add_argument(
        "--analyst-config",
        default="",
        help="with --seed-distill: AnalystConfig overrides for the analyst warm start, "
        "e.g. oracle_tasks_per_env=2000,oracle_fraction=1.0,steps=2000 (default: AnalystConfig())",
    )
    tr.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    tr.add_argument("--out", default="runs/train")
    tr.add_argument("--quiet", action="store_true")
    tr.set_defaults(func=cmd_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except ValueError as e:  # invalid configuration: the message names the field
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    for name in (
        "tasks",
        "eval_tasks",
        "ppo_eval_tasks",
    ):  # the rest is validated by the configs, naming the field
        value = getattr(args, name, None)
        if value is not None and value < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1, got {value}", file=sys.stderr)
            return 2
    world_temperature = getattr(args, "world_temperature", 1.0)
    if args.func is cmd_fidelity and not (math.isfinite(world_temperature) and world_temperature > 0):
        print(f"error: --world-temperature must be > 0, got {world_temperature}", file=sys.stderr)
        return 2
    if getattr(args, "ppo_iterations", 0) < 0:
        print(f"error: --ppo-iterations must be >= 0, got {args.ppo_iterations}", file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
