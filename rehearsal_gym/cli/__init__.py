"""rehearsal-gym: real tool envs, the model's rehearsal of them (SelfSim-v0), and PPO + SEED on both.

Start with `rehearsal-gym demo`; `rehearsal-gym COMMAND --help` lists a command's options."""

from __future__ import annotations

import argparse
import importlib
import math
import sys

import gymnasium as gym

from rehearsal_gym.cli.commands import (
    cmd_demo,
    cmd_eval,
    cmd_fidelity,
    cmd_ground_world,
    cmd_rehearse,
    cmd_train,
    cmd_warmstart,
)
from rehearsal_gym.cli.options import add_config_options
from rehearsal_gym.envs import REAL_ENV_IDS


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where the help already says it, there is none, or the
    option is a plain switch."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        no_default = action.default is None or isinstance(action.default, str) and not action.default
        if no_default or isinstance(action, argparse._StoreTrueAction) or "(default" in text:
            return text
        return super()._get_help_string(action)


MODEL_HELP = "local Hugging Face model directory or Hub id (default: the embedded default, shipped trained)"


def _common(cmd: argparse.ArgumentParser, out: str, model: bool = True, device: bool | None = None) -> None:
    """Options every command shares; --device and --dtype where a model runs (default: with --model)."""
    if model:
        cmd.add_argument("--model", default=None, help=MODEL_HELP)
    if device or (device is None and model):
        _device(cmd)
    cmd.add_argument("--out", default=out, help="directory for the result files (CSV, markdown, PNG)")
    cmd.add_argument("--quiet", action="store_true", help="no progress bars")


def _device(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--device", default=None, help="where the model runs: auto (CUDA if available), cpu, cuda[:N]"
    )
    cmd.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "bfloat16", "float16"],
        help="the model's weights (default float32)",
    )
    cmd.add_argument(
        "--call-format",
        default=None,
        choices=["text", "json"],
        help="how the model writes tool calls: text (CALL name {json}) or json (<tool_call>{...}</tool_call>); "
        "default: json when its chat template uses <tool_call>, else text",
    )


def _envs(cmd: argparse.ArgumentParser, default=REAL_ENV_IDS, what: str = "real envs to run on") -> None:
    cmd.add_argument("--envs", nargs="+", default=list(default), choices=REAL_ENV_IDS, help=what)


def _env_id(text: str) -> str:
    """A registered tool env id, or ``module:id`` (the module is imported first, and registers it)."""
    module, _, env_id = text.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise argparse.ArgumentTypeError(
                f"cannot import {module!r} to register {env_id!r}: {e}"
            ) from None
    if env_id not in gym.registry:
        raise argparse.ArgumentTypeError(
            f"{env_id!r} is not a registered env id; a user env: module:Id (its module registers it)"
        )
    return env_id


def _any_envs(cmd: argparse.ArgumentParser, what: str, default=REAL_ENV_IDS) -> None:
    cmd.add_argument("--envs", nargs="+", type=_env_id, default=list(default), help=what)


def build_parser() -> argparse.ArgumentParser:
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
    _any_envs(ev, "tool envs to evaluate on: registered ids, or module:Id for a user env")
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
    _common(ev, "runs/eval", model=False, device=True)

    fi = command("fidelity", cmd_fidelity)
    _any_envs(fi, "tool envs to measure: registered ids, or module:Id for a user env")
    fi.add_argument("--tasks", type=int, default=50, help="held-out tasks per env")
    fi.add_argument(
        "--world-temperature", type=float, default=1.0, help="environment-role sampling temperature"
    )
    fi.add_argument("--by-template", action="store_true", help="also one row per task template")
    _common(fi, "runs/fidelity")

    gw = command("ground-world", cmd_ground_world)
    _any_envs(
        gw,
        "envs (with an oracle) whose real results ground the world: registered ids, or module:Id",
        ("ToolCall-v0",),
    )
    gw.add_argument("--first-task", type=int, default=10000, help="first train task of the real results")
    gw.add_argument("--tasks", type=int, default=2000, help="train tasks per env (oracle runs)")
    gw.add_argument("--steps", type=int, default=300, help="optimizer steps")
    gw.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (short warmup, cosine decay)")
    gw.add_argument("--seed", type=int, default=0, help="example order")
    gw.add_argument("--out", required=True, help="directory of the grounded world model")
    gw.add_argument("--overwrite", action="store_true", help="replace a model already in --out")
    gw.add_argument(
        "--skip-overlong", action="store_true", help="leave out sequences longer than the context (counted)"
    )
    gw.add_argument("--model", default=None, help=MODEL_HELP)
    _device(gw)
    gw.add_argument("--quiet", action="store_true", help="no progress bars")

    re_ = command("rehearse", cmd_rehearse)
    _envs(re_)
    re_.add_argument(
        "--budgets", nargs="+", type=int, default=[0, 2, 4, 8], help="rehearsed candidates per real action"
    )
    re_.add_argument("--horizon", type=int, default=3, help="imagined turns per rehearsal")
    re_.add_argument(
        "--rule", choices=["vote", "first-pass"], default="vote", help="which rehearsed candidate is executed"
    )
    re_.add_argument(
        "--world-model", default="", help="model directory of the environment role (default: the policy)"
    )
    re_.add_argument("--tasks", type=int, default=30, help="held-out tasks per env")
    re_.add_argument("--first-task", type=int, default=0, help="index of the first held-out task")
    _common(re_, "runs/rehearsal")

    tr = command("train", cmd_train)
    from rehearsal_gym.agents.config import PPOConfig

    add_config_options(tr, PPOConfig)  # the CLI mirrors PPOConfig one-to-one, section by section
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
