"""rehearsal-gym: real tool envs, the model's rehearsal of them (SelfSim-v0), and PPO + SEED on both.

Start with `rehearsal-gym demo`; `rehearsal-gym COMMAND --help` lists a command's options."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from .defaults import REAL_ENV_IDS


def _model(args: argparse.Namespace):
    """The model of --model (a local directory), else the embedded default (shipped trained)."""
    from .defaults import resolve_lm

    return resolve_lm(getattr(args, "model", None))


def _model_name(args: argparse.Namespace) -> str:
    from .defaults import SHIPPED_DEFAULT, default_model_dir

    if getattr(args, "model", None):
        return args.model
    path = default_model_dir()
    return "the shipped default" if path == SHIPPED_DEFAULT else f"the installed default ({path})"


def cmd_demo(args: argparse.Namespace) -> int:
    """Oracle, random policy and the default model on held-out tasks; then the same short PPO run in
    the real env and in SelfSim-v0, both evaluated in the real env (a few minutes on 2 CPU cores)."""
    from .demo import run_demo

    run_demo(
        _model(args),
        model_name=_model_name(args),
        envs=tuple(args.envs),
        tasks=args.tasks,
        swap_env=args.swap_env,
        iterations=args.iterations,
        eval_tasks=args.eval_tasks,
        fidelity_tasks=args.fidelity_tasks,
        seed=args.seed,
        out=args.out,
        progress=not args.quiet,
    )
    return 0


def _warmstart_command_config(args: argparse.Namespace):
    """The WarmStartConfig of `rehearsal-gym warmstart`'s options (None keeps a default)."""
    from .warmstart import WarmStartConfig

    overrides = {
        "steps": args.steps,
        "tasks_per_env": args.tasks_per_env,
        "seed": args.seed,
        "polish_steps": args.polish_steps,
        "polish_tasks_per_env": args.polish_tasks_per_env,
        "polish_envs": tuple(args.polish_envs) if args.polish_envs else None,
        "polish_env_tasks": tuple(args.polish_env_tasks) if args.polish_env_tasks else None,
    }
    return WarmStartConfig(**{k: v for k, v in overrides.items() if v is not None})


def cmd_warmstart(args: argparse.Namespace) -> int:
    """Train the default model from scratch (the one command that trains it; about an hour on 2 CPU
    cores), report held-out success per family and save it with a manifest."""
    import shutil

    from .defaults import installed_default_dir
    from .report import plot_curve, write_table
    from .rollout import evaluate
    from .warmstart import (
        polish_cached_main_phase,
        save_warm_start,
        train_warm_start,
        warm_start_path,
        write_manifest,
    )

    config = _warmstart_command_config(args)
    if args.reuse_main_phase and not config.polish_steps:
        raise ValueError("--reuse-main-phase needs --polish-steps > 0 (there is no polish to run)")
    save = Path(args.save) if args.save else warm_start_path(config)
    out = Path(args.out)
    t0 = time.time()
    if args.reuse_main_phase:
        lm, losses = polish_cached_main_phase(config, progress=not args.quiet)
    else:
        lm, losses = train_warm_start(config, progress=not args.quiet)
    train_s = time.time() - t0
    title = f"warm start: copy drills to step {config.drill_steps}, then episodes of both roles"
    if config.polish_steps:
        title += f", polish from step {config.drill_steps + config.steps}"
    plot_curve(losses, out / "warmstart_loss.png", title, "masked NLL")
    rows, held_out = [], {}
    for env_id in REAL_ENV_IDS:
        result = evaluate(lm, env_id, args.eval_tasks)
        held_out[env_id] = {"tasks": result["n"], "success": result["success"]}
        rows.append({"env": env_id, "held-out tasks": result["n"], "success": result["success"]})
        print(f"{env_id}: {result['success']:.1%} of {result['n']} held-out tasks", flush=True)
    save_warm_start(lm, losses, save)
    command = "rehearsal-gym " + " ".join(shlex.quote(a) for a in args.argv)
    write_manifest(save, lm, config, held_out, command)
    print(f"\nsaved: {save} (use it with --model {save})")
    if args.install:
        installed = installed_default_dir()
        lm.save(installed)  # atomic
        shutil.copy2(save / "manifest.json", installed / "manifest.json")
        print(f"installed as the default: {installed} (delete it to go back to the shipped default)")
    polish = f" + {config.polish_steps} polish steps" if config.polish_steps else ""
    print(
        f"\nwarm start: {config.steps} steps{polish} in {train_s:.0f}s, final loss {np.mean(losses[-20:]):.3f}\n"
    )
    print(write_table(rows, out, "warmstart"))
    print(f"\nwritten: {out}/warmstart.csv, {out}/warmstart.md, {out}/warmstart_loss.png")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """Held-out success of models as agent in the real envs, side by side on the same tasks: each
    model's tasks gained and lost against the first, with a sign test."""
    from .defaults import resolve_lm
    from .report import comparison_rows, write_table
    from .rollout import evaluate

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
            models[name] = resolve_lm(None if path == "default" else path)
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
    """PPO from the default model (or --model) in the real env or in SelfSim-v0 (--rehearse); held-out
    success in the real env before and after."""
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


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where the help already says it, there is none, or the
    option is a plain switch."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        no_default = action.default is None or isinstance(action.default, str) and not action.default
        if no_default or isinstance(action, argparse._StoreTrueAction) or "(default" in text:
            return text
        return super()._get_help_string(action)


MODEL_HELP = "local Hugging Face model directory (default: the embedded default, shipped trained)"


def _common(cmd: argparse.ArgumentParser, out: str, model: bool = True) -> None:
    """Options every command shares."""
    if model:
        cmd.add_argument("--model", default=None, help=MODEL_HELP)
    cmd.add_argument("--out", default=out, help="directory for the result files (CSV, markdown, PNG)")
    cmd.add_argument("--quiet", action="store_true", help="no progress bars")


def _envs(cmd: argparse.ArgumentParser, default=REAL_ENV_IDS, what: str = "real envs to run on") -> None:
    cmd.add_argument("--envs", nargs="+", default=list(default), choices=REAL_ENV_IDS, help=what)


def build_parser() -> argparse.ArgumentParser:
    from .fieldhelp import field_help

    parser = argparse.ArgumentParser(prog="rehearsal-gym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func) -> argparse.ArgumentParser:
        doc = " ".join(func.__doc__.split())
        cmd = sub.add_parser(name, help=doc, description=doc, formatter_class=_HelpFormatter)
        cmd.set_defaults(func=func)
        return cmd

    demo = command("demo", cmd_demo)
    _envs(demo, what="families of the held-out table")
    demo.add_argument("--tasks", type=int, default=100, help="held-out tasks per family in the table")
    demo.add_argument(
        "--swap-env",
        default="ToolCall-v0",
        choices=REAL_ENV_IDS,
        help="family of the real-vs-rehearsed PPO runs",
    )
    demo.add_argument("--iterations", type=int, default=3, help="PPO iterations of each live run")
    demo.add_argument(
        "--eval-tasks", type=int, default=500, help="held-out tasks of the swap (before and after, the same)"
    )
    demo.add_argument("--fidelity-tasks", type=int, default=16, help="held-out tasks of the fidelity line")
    demo.add_argument("--seed", type=int, default=0, help="seed of the PPO runs and the random policy")
    _common(demo, "runs/demo")

    ws = command("warmstart", cmd_warmstart)
    ws.add_argument("--steps", type=int, default=None, help="main-phase steps (default: WarmStartConfig's)")
    ws.add_argument(
        "--tasks-per-env", type=int, default=None, help="oracle episodes per env (default: WarmStartConfig's)"
    )
    ws.add_argument(
        "--polish-steps",
        type=int,
        default=None,
        help="steps on fresh demos of both roles after the main phase, 0 = none (default: WarmStartConfig's)",
    )
    ws.add_argument(
        "--polish-tasks-per-env",
        type=int,
        default=None,
        help="fresh train tasks per env whose oracle demos the polish trains on (default: WarmStartConfig's)",
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
    ws.add_argument("--eval-tasks", type=int, default=100, help="held-out tasks per env of the report")
    ws.add_argument("--seed", type=int, default=0, help="model init and data order")
    ws.add_argument(
        "--save",
        default=None,
        help="directory of the trained model (default: $REHEARSAL_GYM_HOME/warmstart-<config key>)",
    )
    ws.add_argument(
        "--install",
        action="store_true",
        help="also make it the default ($REHEARSAL_GYM_HOME/default), used in place of the shipped one",
    )
    _common(ws, "runs/warmstart", model=False)

    ev = command("eval", cmd_eval)
    ev.add_argument(
        "--model",
        nargs="+",
        required=True,
        help="model directories or 'default' (the embedded default), each optionally NAME=PATH; "
        "the first is the baseline",
    )
    _envs(ev)
    ev.add_argument("--tasks", type=int, default=100, help="held-out tasks per env")
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
    _common(ev, "runs/eval", model=False)

    fi = command("fidelity", cmd_fidelity)
    _envs(fi)
    fi.add_argument("--tasks", type=int, default=50, help="held-out tasks per env")
    fi.add_argument(
        "--world-temperature", type=float, default=1.0, help="environment-role sampling temperature"
    )
    fi.add_argument("--by-template", action="store_true", help="also one row per task template")
    _common(fi, "runs/fidelity")

    gw = command("ground-world", cmd_ground_world)
    _envs(gw, ("ToolCall-v0",), "envs whose real results ground the world")
    gw.add_argument("--first-task", type=int, default=10000, help="first train task of the real results")
    gw.add_argument("--tasks", type=int, default=2000, help="train tasks per env (oracle runs)")
    gw.add_argument("--steps", type=int, default=300, help="optimizer steps")
    gw.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (short warmup, cosine decay)")
    gw.add_argument("--seed", type=int, default=0, help="example order")
    gw.add_argument("--out", required=True, help="directory of the grounded world model")
    gw.add_argument("--overwrite", action="store_true", help="replace a model already in --out")
    gw.add_argument("--model", default=None, help=MODEL_HELP)
    gw.add_argument("--quiet", action="store_true", help="no progress bars")

    re_ = command("rehearse", cmd_rehearse)
    _envs(re_)
    re_.add_argument(
        "--budgets", nargs="+", type=int, default=[0, 2, 4], help="rehearsed candidates per real action"
    )
    re_.add_argument("--horizon", type=int, default=3, help="imagined turns per rehearsal")
    re_.add_argument("--sequential", action="store_true", help="each rehearsal sees the earlier ones")
    re_.add_argument("--tasks", type=int, default=30, help="held-out tasks per env")
    _common(re_, "runs/rehearsal")

    tr = command("train", cmd_train)
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
    helps = field_help(PPOConfig)
    for f in dataclasses.fields(PPOConfig):  # the CLI mirrors PPOConfig one-to-one
        flag = "--" + f.name.replace("_", "-")
        text = helps[f.name].replace("%", "%%")
        if isinstance(f.default, bool):
            tr.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=text)
        else:
            tr.add_argument(
                flag, type=type(f.default), default=f.default, choices=choices.get(f.name), help=text
            )
    tr.add_argument("--eval-tasks", type=int, default=100, help="held-out tasks evaluated before and after")
    tr.add_argument(
        "--analyst-config",
        default="",
        help="with --seed-distill: AnalystConfig overrides for the analyst warm start, "
        "e.g. oracle_tasks_per_env=2000,steps=2000 (default: AnalystConfig())",
    )
    tr.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    _common(tr, "runs/train")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return _run(args)
    except ValueError as e:  # invalid configuration: the message names the field
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    # counts checked here; everything else is validated by the configs, naming the field
    for name in ("tasks", "eval_tasks", "iterations", "fidelity_tasks"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    world_temperature = getattr(args, "world_temperature", 1.0)
    if args.func is cmd_fidelity and not (math.isfinite(world_temperature) and world_temperature > 0):
        raise ValueError(f"--world-temperature must be > 0, got {world_temperature}")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
