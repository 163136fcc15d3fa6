"""The CLI's commands: one `cmd_<name>(args) -> exit code` per subcommand; its docstring is its help."""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

import numpy as np

from rehearsal_gym.cli.options import config_from_args, named_paths
from rehearsal_gym.envs import REAL_ENV_IDS


def _model(args: argparse.Namespace):
    """The model of --model (a local directory or Hub id), else the embedded default (shipped
    trained), on --device in --dtype."""
    from rehearsal_gym.defaults import resolve_lm

    try:
        return resolve_lm(
            getattr(args, "model", None),
            device=getattr(args, "device", None),
            dtype=getattr(args, "dtype", None),
            call_format=getattr(args, "call_format", None),
        )
    except (OSError, ValueError) as e:
        raise SystemExit(f"--model: {e}") from None


def _model_name(args: argparse.Namespace) -> str:
    from rehearsal_gym.defaults import SHIPPED_DEFAULT, default_model_dir

    if getattr(args, "model", None):
        return args.model
    path = default_model_dir()
    return "the shipped default" if path == SHIPPED_DEFAULT else f"the installed default ({path})"


def cmd_demo(args: argparse.Namespace) -> int:
    """Oracle, random policy and the default model on held-out tasks; then the same short PPO run in
    the real env and in SelfSim-v0, both evaluated in the real env (a few minutes on 2 CPU cores)."""
    from rehearsal_gym.cli.demo import run_demo

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
    from rehearsal_gym.training.warmstart import WarmStartConfig

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

    from rehearsal_gym.core.report import plot_curve, write_table
    from rehearsal_gym.core.rollout import evaluate
    from rehearsal_gym.defaults import installed_default_dir
    from rehearsal_gym.training.warmstart import (
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
    from rehearsal_gym.core.report import comparison_rows, write_table
    from rehearsal_gym.core.rollout import evaluate
    from rehearsal_gym.defaults import resolve_lm

    if args.tasks < 1:
        raise SystemExit(f"--tasks must be >= 1, got {args.tasks}")
    if args.first_task < 0:
        raise SystemExit(f"--first-task must be >= 0, got {args.first_task}")
    if args.drills < 0:
        raise SystemExit(f"--drills must be >= 0, got {args.drills}")
    if args.recall < 0:
        raise SystemExit(f"--recall must be >= 0, got {args.recall}")
    try:
        paths = named_paths(args.model, "--model")
    except ValueError as e:
        raise SystemExit(str(e)) from None
    models = {}
    for name, path in paths.items():
        try:
            models[name] = resolve_lm(
                None if path == "default" else path,
                device=args.device,
                dtype=args.dtype,
                call_format=args.call_format,
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

    from rehearsal_gym.rehearsal.demos import DRILL_KINDS, copy_drills, record_oracle_episodes
    from rehearsal_gym.training.warmstart import drill_accuracy

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
    from rehearsal_gym.rehearsal.demos import record_oracle_episodes
    from rehearsal_gym.rehearsal.recall import SOURCES, recall_counts

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
    from rehearsal_gym.core.report import write_table
    from rehearsal_gym.rehearsal.fidelity import measure_fidelity

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
    from rehearsal_gym.training.warmstart import ground_world

    out = Path(args.out)
    if (out / "config.json").is_file() and not args.overwrite:
        raise ValueError(f"{out} already holds a model; pass --overwrite to replace it")
    if args.first_task < 0:
        raise ValueError(f"--first-task must be >= 0, got {args.first_task}")
    lm = _model(args)
    tasks = range(args.first_task, args.first_task + args.tasks)
    losses = ground_world(
        lm,
        args.envs,
        tasks,
        args.steps,
        lr=args.lr,
        seed=args.seed,
        progress=not args.quiet,
        skip_overlong=args.skip_overlong,
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
    """Held-out success with private rehearsal budgets N (rehearsed candidates per real action), how
    often rehearsal changed the executed action, and what it cost in generated sequences."""
    from rehearsal_gym.core.model import LM
    from rehearsal_gym.core.report import paired_sign_test, write_table
    from rehearsal_gym.rehearsal.planner import RehearsalConfig, planner_success

    lm = _model(args)
    world = None
    if args.world_model:
        try:
            world = LM.load(args.world_model, device=lm.device, dtype=args.dtype)
        except (OSError, ValueError) as e:
            raise SystemExit(f"--world-model: {e}") from None
    rows = []
    for env_id in args.envs:
        baseline = None
        for n in args.budgets:
            config = RehearsalConfig(n=n, horizon=args.horizon, rule=args.rule)
            r = planner_success(lm, env_id, args.tasks, config, first_task=args.first_task, world=world)
            baseline = baseline if baseline is not None else r["wins"]
            test = paired_sign_test(baseline, r["wins"])
            decisions = max(r["decisions"], 1)
            rows.append(
                {
                    "env": env_id,
                    "N": n,
                    "tasks": args.tasks,
                    "success": round(r["success"], 4),
                    f"gained vs N={args.budgets[0]}": test["gained"],
                    "lost": test["lost"],
                    "p": f"{test['p_value']:.3f}",
                    "decisions": r["decisions"],
                    "changed": round(r["changed"] / decisions, 4),
                    "sequences per decision": f"{r['generated'] / decisions:.1f}",
                }
            )
            print(
                f"{env_id} N={n}: {r['success']:.1%}, {r['changed']} of {r['decisions']} actions changed, "
                f"{r['generated'] / decisions:.1f} sequences per decision",
                flush=True,
            )
    world_name = args.world_model or "the policy"
    print(f"\nHeld-out success with private rehearsal (rule {args.rule}, world: {world_name})\n")
    print(write_table(rows, Path(args.out), "rehearsal"))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """PPO from the default model (or --model) in the real env or in SelfSim-v0 (--rehearse); held-out
    success in the real env before and after."""
    from rehearsal_gym.agents.config import PPOConfig
    from rehearsal_gym.agents.train import train
    from rehearsal_gym.training.analyst import analyst_config

    config = config_from_args(PPOConfig, args)
    analyst = analyst_config(args.analyst_config)  # checked before the model loads
    if args.analyst_config and not config.skills.seed_distill:
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
