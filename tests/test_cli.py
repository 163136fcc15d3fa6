import json
import os
import subprocess
import sys

import pytest


def test_demo_shows_the_table_the_swap_and_fidelity(tiny_lm, tmp_path, capsys):
    from rehearsal_gym.cli.demo import run_demo

    small = {"tasks_per_iter": 1, "group_size": 2, "minibatch_size": 2}
    result = run_demo(
        tiny_lm,
        model_name="tiny",
        envs=("Retail-v0",),
        tasks=3,
        iterations=1,
        eval_tasks=3,
        fidelity_tasks=2,
        out=tmp_path,
        progress=False,
        ppo_overrides=small,
    )
    printed = capsys.readouterr().out
    assert "| env | tasks | oracle | random | default model |" in printed
    assert "| Retail-v0 | 3 | 100.0% | 0.0% |" in printed
    assert "| model | success | gained | lost | p |" in printed
    assert "imagined" in printed and "usable" in printed and "demo took" in printed
    names = [row["model"] for row in result["swap"]]
    assert names[:3] == ["start (shipped default)", "live PPO real", "live PPO rehearsed"]
    for row in result["swap"]:  # every model on the same 3 tasks as the start
        assert row["gained"] + row["lost"] <= 3
    for name in ("heldout.csv", "heldout.md", "swap.csv", "swap.md", "swap.png"):
        assert (tmp_path / name).is_file(), name
    for setting in ("real", "rehearsed"):
        assert (tmp_path / f"ppo-{setting}" / "learning_curve.png").is_file()
    rehearsed = json.loads((tmp_path / "ppo-rehearsed" / "result.json").read_text())
    assert rehearsed["rehearse"] == "replace" and rehearsed["tasks"] == 3


def test_every_cli_option_has_a_help_line():
    import argparse

    from rehearsal_gym.cli import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in commands.choices.items():
        for action in command._actions:
            if action.option_strings and action.dest != "help":
                assert action.help and action.help.strip(), f"{name} {action.option_strings[0]}"
    from rehearsal_gym.agents.config import PPOConfig

    printed = commands.choices["train"].format_help()
    for field in PPOConfig().flat():
        assert "--" + field.replace("_", "-") in printed
    assert "(default: 2e-05)" in printed  # the default of --lr is shown


def test_cli_rejects_bad_numbers():
    out = subprocess.run(
        [sys.executable, "-m", "rehearsal_gym.cli", "demo", "--tasks", "0"], capture_output=True, text=True
    )
    assert out.returncode == 2 and "--tasks must be >= 1" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "rehearsal_gym.cli", "demo", "--iterations", "0"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "--iterations must be >= 1" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "rehearsal_gym.cli", "fidelity", "--world-temperature", "0"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "--world-temperature must be > 0" in out.stderr


def test_train_smoke_writes_results_and_resumes(tiny_lm, tmp_path):
    tiny_lm.save(tmp_path / "model")
    cmd = [
        sys.executable,
        "-m",
        "rehearsal_gym.cli",
        "train",
        "--model",
        str(tmp_path / "model"),
        "--env",
        "ToolCall-v0",
        "--iterations",
        "1",
        "--tasks-per-iter",
        "1",
        "--group-size",
        "2",
        "--eval-tasks",
        "2",
        "--out",
        str(tmp_path / "run"),
        "--quiet",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert '"after"' in out.stdout
    for name in ("progress.csv", "learning_curve.png", "result.json", "checkpoint/trainer_state.json"):
        assert (tmp_path / "run" / name).is_file(), name
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    after = json.loads((tmp_path / "run" / "after.json").read_text())
    assert len(after["outcomes"]) == result["tasks"] == 2
    assert result["gained"] + result["lost"] <= 2 and 0.0 < result["p_value"] <= 1.0
    cmd[cmd.index("--iterations") + 1] = "2"
    out = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "resumed from" in out.stdout, out.stderr[-2000:]


def test_train_options_mirror_the_config():
    from rehearsal_gym.agents.config import PPOConfig

    from rehearsal_gym.cli import build_parser
    from rehearsal_gym.cli.options import config_from_args

    args = build_parser().parse_args(
        [
            "train",
            "--temperature",
            "0.7",
            "--skill-hints",
            "--advantage",
            "gae",
            "--kl-coef",
            "0.05",
            "--no-train-env-role",
            "--lambda-opd",
            "0.2",
        ]
    )
    config = config_from_args(PPOConfig, args)
    assert (config.ppo.temperature, config.skills.skill_hints, config.ppo.advantage, config.ppo.kl_coef) == (
        0.7,
        True,
        "gae",
        0.05,
    )
    assert config.rehearsal.train_env_role is False and config.skills.lambda_opd == 0.2


def test_cli_config_error_names_the_field():
    out = subprocess.run(
        [sys.executable, "-m", "rehearsal_gym.cli", "train", "--group-size", "0"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "group_size" in out.stderr
    for bad, field in (
        ("steps=0", "AnalystConfig.steps"),
        ("lr=fast", "AnalystConfig.lr"),
        ("beta=1", "NAME"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "rehearsal_gym.cli", "train", "--seed-distill", "--analyst-config", bad],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 2 and field in out.stderr, out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "rehearsal_gym.cli", "train", "--analyst-config", "steps=800"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "needs --seed-distill" in out.stderr, out.stderr


def test_analyst_config_overrides_reach_the_config():
    from rehearsal_gym.training.analyst import AnalystConfig, analyst_config

    assert analyst_config("") == analyst_config("default") == AnalystConfig()
    config = analyst_config("oracle_tasks_per_env=2000,oracle_fraction=1,steps=2000")
    assert (config.oracle_tasks_per_env, config.oracle_fraction, config.steps) == (2000, 1.0, 2000)
    assert isinstance(config.steps, int) and isinstance(config.oracle_fraction, float)
    first = analyst_config("oracle_tasks_per_env=none,oracle_fraction=0.5,steps=400")
    assert (first.oracle_tasks_per_env, first.oracle_fraction, first.steps) == (None, 0.5, 400)


def test_warmstart_options_reach_the_config_and_are_validated():
    from rehearsal_gym.cli import build_parser
    from rehearsal_gym.cli.commands import _warmstart_command_config
    from rehearsal_gym.training.warmstart import WarmStartConfig

    parse = build_parser().parse_args
    args = parse(["warmstart", "--polish-steps", "9000", "--polish-tasks-per-env", "6000"])
    config = _warmstart_command_config(args)
    assert (config.polish_steps, config.polish_tasks_per_env, config.polish_envs) == (9000, 6000, None)
    assert config == WarmStartConfig(polish_steps=9000, polish_tasks_per_env=6000)
    args = parse(["warmstart", "--polish-envs", "Retail-v0", "Finance-v0"])
    assert _warmstart_command_config(args).polish_envs == ("Retail-v0", "Finance-v0")
    args = parse(["warmstart", "--polish-envs", "Retail-v0", "Finance-v0", "--polish-env-tasks", "600", "50"])
    assert _warmstart_command_config(args).polish_env_tasks == (600, 50)
    for bad, field in [
        (["--polish-tasks-per-env", "0"], "polish_tasks_per_env"),
        (["--polish-env-tasks", "5", "5"], "polish_env_tasks"),  # three envs, two counts
        (["--polish-steps", "0", "--reuse-main-phase"], "polish-steps"),
    ]:
        out = subprocess.run(
            [sys.executable, "-m", "rehearsal_gym.cli", "warmstart", *bad], capture_output=True, text=True
        )
        assert out.returncode == 2 and field in out.stderr, out.stderr


def test_eval_compares_named_models_on_the_same_offset_tasks(tiny_lm, tmp_path):
    from rehearsal_gym.core.rollout import evaluate

    tiny_lm.save(tmp_path / "model")
    cmd = [sys.executable, "-m", "rehearsal_gym.cli", "eval", "--envs", "Finance-v0", "--tasks", "3"]
    cmd += [
        "--first-task",
        "50",
        "--drills",
        "3",
        "--recall",
        "4",
        "--out",
        str(tmp_path / "eval"),
        "--quiet",
    ]
    (tmp_path / "lr=1e-4").mkdir()
    tiny_lm.save(tmp_path / "lr=1e-4" / "model")
    bare = str(tmp_path / "lr=1e-4" / "model")  # an existing path holding "=" is a path, not NAME=PATH
    cmd += ["--model", f"a={tmp_path / 'model'}", f"b={bare}", bare]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "held-out tasks 50..52 (gained / lost: against a)" in out.stdout
    rows = (tmp_path / "eval" / "eval_Finance-v0.csv").read_text().splitlines()
    assert rows[0].startswith("model,success,gained,lost,p,")
    assert rows[1].split(",")[2:5] == rows[2].split(",")[2:5] == ["0", "0", "1.000"]  # same weights
    assert [r.split(",")[0] for r in rows[1:]] == ["a", "b", bare]
    drills = (tmp_path / "eval" / "eval_drills.csv").read_text().splitlines()
    assert drills[0] == "model,env,repeat,lookup" and len(drills) == 4
    assert drills[1].split(",")[2:] == drills[2].split(",")[2:]  # same weights, same drills
    recall = (tmp_path / "eval" / "eval_recall.csv").read_text().splitlines()
    assert recall[0] == "model,env,template,from request,from result" and len(recall) > 3
    assert "held-out tasks 50..53, teacher-forced" in out.stdout.replace("\n", " ")
    shifted = evaluate(tiny_lm, "Finance-v0", 2, first_task=4)
    assert shifted["first_task"] == 4 and len(shifted["templates"]) == 2
    alone = evaluate(tiny_lm, "Finance-v0", 6)
    assert shifted["outcomes"] == alone["outcomes"][4:] and shifted["templates"] == alone["templates"][4:]
    with pytest.raises(ValueError, match="first_task"):
        evaluate(tiny_lm, "Finance-v0", 2, first_task=-1)


def test_eval_rejects_bad_input(tmp_path):
    base = [sys.executable, "-m", "rehearsal_gym.cli", "eval", "--model", str(tmp_path)]
    out = subprocess.run(base + ["--first-task", "-1"], capture_output=True, text=True)
    assert out.returncode != 0 and "--first-task must be >= 0" in out.stderr
    out = subprocess.run(base + ["--drills", "-2"], capture_output=True, text=True)
    assert out.returncode != 0 and "--drills must be >= 0" in out.stderr
    out = subprocess.run(base + ["--recall", "-1"], capture_output=True, text=True)
    assert out.returncode != 0 and "--recall must be >= 0" in out.stderr
    out = subprocess.run(base + [f"x={tmp_path}", f"x={tmp_path}"], capture_output=True, text=True)
    assert out.returncode != 0 and "names 'x' twice" in out.stderr
    out = subprocess.run(base + ["--envs", "Finance-v0", "--tasks", "1"], capture_output=True, text=True)
    assert out.returncode != 0 and "is not a model directory" in out.stderr


def test_ground_world_writes_a_world_model_and_keeps_an_existing_one(tiny_lm, tmp_path):
    tiny_lm.save(tmp_path / "model")
    cmd = [sys.executable, "-m", "rehearsal_gym.cli", "ground-world", "--model", str(tmp_path / "model")]
    cmd += ["--tasks", "4", "--first-task", "20", "--steps", "3", "--out", str(tmp_path / "world"), "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "grounded world written to" in out.stdout
    record = json.loads((tmp_path / "world" / "ground_world.json").read_text())
    assert record["tasks"] == [20, 24] and record["envs"] == ["ToolCall-v0"] and len(record["losses"]) == 3
    weights = (tmp_path / "world" / "model.safetensors").read_bytes()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "--overwrite" in out.stderr
    assert (tmp_path / "world" / "model.safetensors").read_bytes() == weights  # nothing lost
    bad = [*cmd[:-2], str(tmp_path / "w2"), "--first-task", "-1"]
    out = subprocess.run(bad, capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "--first-task must be >= 0" in out.stderr


USER_ENV = '''
import functools
import gymnasium as gym
from rehearsal_gym import ToolTask, make_tool_env


class Echo:
    def __init__(self, task):
        self.said = []

    def say(self, text: str) -> dict:
        """Say something.

        Args:
            text: what to say
        """
        self.said.append(text)
        return {"said": text}


TASKS = [ToolTask(f"Say {w}.", {"w": w}) for w in ["hi", "yo", "ok", "no", "go", "up", "on", "so", "we", "me"]]
gym.register("Echo-v0", entry_point=functools.partial(
    make_tool_env, Echo, TASKS, lambda task, echo, answer: task.data["w"] in echo.said))
'''


def test_eval_and_fidelity_take_a_user_env_by_module_and_id(tiny_lm, tmp_path):
    tiny_lm.save(tmp_path / "model")
    (tmp_path / "user_envs.py").write_text(USER_ENV)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    base = [sys.executable, "-m", "rehearsal_gym.cli"]
    for cmd in (
        ["eval", "--model", str(tmp_path / "model")],
        ["fidelity", "--model", str(tmp_path / "model")],
    ):
        out = subprocess.run(
            base
            + cmd
            + ["--envs", "user_envs:Echo-v0", "--tasks", "2", "--out", str(tmp_path / cmd[0]), "--quiet"],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert "Echo-v0" in out.stdout
    out = subprocess.run(
        base + ["eval", "--model", "default", "--envs", "no_such_module:X-v0"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 2 and "cannot import 'no_such_module'" in out.stderr


def test_rehearse_reports_success_changes_and_cost_per_budget(tiny_lm, tmp_path):
    tiny_lm.save(tmp_path / "model")
    tiny_lm.save(tmp_path / "world")
    cmd = [sys.executable, "-m", "rehearsal_gym.cli", "rehearse", "--envs", "ToolCall-v0", "--tasks", "2"]
    cmd += ["--first-task", "5", "--budgets", "0", "2", "--horizon", "1", "--model", str(tmp_path / "model")]
    cmd += ["--world-model", str(tmp_path / "world"), "--out", str(tmp_path / "reh"), "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"rule vote, world: {tmp_path / 'world'}" in out.stdout
    rows = (tmp_path / "reh" / "rehearsal.csv").read_text().splitlines()
    assert rows[0] == "env,N,tasks,success,gained vs N=0,lost,p,decisions,changed,sequences per decision"
    base, rehearsed = (r.split(",") for r in rows[1:])
    assert base[1] == "0" and base[4:7] == ["0", "0", "1.000"] and base[9] == "1.0"
    assert rehearsed[1] == "2" and float(rehearsed[9]) >= 2.0  # two candidates at least per decision
    bad = subprocess.run(
        [*cmd[:-5], "--world-model", str(tmp_path / "missing"), "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode != 0 and "--world-model" in bad.stderr
