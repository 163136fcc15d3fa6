"""A user's own toolbox as a tool env (`make_tool_env`) and SelfSim over it: no family of ours."""

import copy
import functools
import json
import sqlite3
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env
from rehearsal_gym.agents import PPOConfig, PPOTrainer
from rehearsal_gym.envs import ENV_IDS
from rehearsal_gym.envs.toolbox import MAX_RESULT_CHARS, toolbox_tools

import rehearsal_gym
from rehearsal_gym import ResultBank, SelfSimEnv, ToolError, ToolTask, make_tool_env
from rehearsal_gym.core.model import LM

CALLS: list[str] = []  # every tool method called, in order, by any KeyValue instance


class KeyValue:
    """A key-value store; its hostile tools misbehave on purpose."""

    def __init__(self, task: ToolTask) -> None:
        self.store = dict(task.data.get("store", {}))

    def get(self, key: str) -> dict:
        """Read a key.

        Args:
            key: the key
        """
        CALLS.append("get")
        if key not in self.store:
            raise ToolError(f"no key {key!r}")
        return {"key": key, "value": self.store[key]}

    def put(self, key: str, value: int) -> dict:
        """Write a key.

        Args:
            key: the key
            value: the new value
        """
        CALLS.append("put")
        self.store[key] = value
        return {"key": key, "value": value}

    def keys(self, prefix: str | None = None) -> list:
        """The keys, sorted.

        Args:
            prefix: only keys that start with it
        """
        CALLS.append("keys")
        return sorted(k for k in self.store if k.startswith(prefix or ""))

    def boom(self) -> dict:
        """Raise an exception."""
        raise ZeroDivisionError("division by zero")

    def weird(self) -> dict:
        """Return an object that is not JSON."""
        return {"when": object()}

    def huge(self) -> dict:
        """Return a result too large."""
        return {"blob": "x" * (MAX_RESULT_CHARS + 10)}

    def slow(self) -> dict:
        """Take longer than the time limit."""
        time.sleep(3)
        return {"late": True}

    def _helper(self) -> None:
        pass


TASKS = [
    ToolTask(f"Set k{i} to {i}, then answer done.", {"store": {"a": 1}, "i": i}, template=f"t{i % 3}")
    for i in range(40)
]


def reward(task: ToolTask, kv: KeyValue, answer: str) -> float:
    return float(kv.store.get(f"k{task.data['i']}") == task.data["i"]) * (1.0 if answer == "done" else 0.5)


def oracle(task: ToolTask) -> list[str]:
    i = task.data["i"]
    return [f'CALL put {{"key": "k{i}", "value": {i}}}', "ANSWER done"]


def kv_env(**kwargs) -> rehearsal_gym.ToolEnv:
    return make_tool_env(KeyValue, TASKS, reward, tool_timeout=0.5, **kwargs)


gym.register("KeyValue-v0", entry_point=functools.partial(make_tool_env, KeyValue, TASKS, reward))


def solve(env, i=None):
    obs, info = env.reset(options=None if i is None else {"task_index": i})
    task = env.unwrapped.task
    out = [env.step(t) for t in oracle(task)]
    return task, out


def test_schemas_come_from_signatures_and_docstrings():
    tools = toolbox_tools(KeyValue)
    assert sorted(tools) == ["boom", "get", "huge", "keys", "put", "slow", "weird"]
    assert tools["put"].parameters["properties"]["value"]["type"] == "integer"
    assert tools["put"].required == ["key", "value"] and tools["keys"].required == []
    assert tools["get"].description == "Read a key."


def test_check_env_and_a_real_episode():
    env = kv_env()
    check_env(env)
    check_env(gym.make("KeyValue-v0").unwrapped)
    task, steps = solve(env, 3)
    obs, r, term, trunc, info = steps[-1]
    assert r == 1.0 and term and info["success"] and task.template in {"t0", "t1", "t2"}
    assert json.loads(steps[0][0]) == {"key": f"k{task.data['i']}", "value": task.data["i"]}
    env.reset(options={"task": task})
    env.step(oracle(task)[0])
    assert env.step("ANSWER fine")[1] == 0.5


def test_rewards_need_not_be_binary_and_success_follows_the_threshold():
    env = kv_env(success_threshold=0.5)
    task, _ = solve(env, 0)
    env.reset(options={"task": task})
    env.step(oracle(task)[0])
    _, r, _, _, info = env.step("ANSWER fine")
    assert r == 0.5 and info["success"]


def test_splits_are_disjoint_deterministic_and_index_wraps():
    env_train, env_test = kv_env(split="train"), kv_env(split="test")
    family = env_train.family
    train, test = family.splits["train"], family.splits["test"]
    assert train and test and {t.id for t in train}.isdisjoint(t.id for t in test)
    assert len(train) + len(test) == len(TASKS)
    assert family.task("train", len(train) + 2) == train[2]
    explicit = make_tool_env(KeyValue, TASKS[:5], reward, test_tasks=TASKS[5:7])
    assert explicit.family.splits["test"] == TASKS[5:7]
    explicit.reset(seed=1)
    first = explicit.task
    explicit.reset(seed=1)
    assert explicit.task == first and env_test.family.templates


def test_a_task_generator_gives_the_same_task_for_the_same_index():
    def draw(rng, index):
        return ToolTask(f"Set k{index} to {int(rng.integers(100))}", {"i": index})

    env = make_tool_env(KeyValue, draw, reward)
    assert env.family.task("train", 7) == env.family.task("train", 7)
    assert env.family.task("train", 7) != env.family.task("train", 8)
    assert env.family.split_of(env.family.task("test", 3)) == "test"


@pytest.mark.parametrize(
    "action, error",
    [
        ("CALL boom {}", "ZeroDivisionError: division by zero"),
        ("CALL weird {}", "is not JSON"),
        ("CALL huge {}", "characters of JSON"),
        ('CALL get {"key": "nope"}', "no key 'nope'"),
        ('CALL put {"key": "a"}', "'value' missing"),
    ],
)
def test_hostile_tools_are_refused_calls_not_exceptions(action, error):
    env = kv_env()
    env.reset(options={"task_index": 0})
    obs, reward, term, trunc, info = env.step(action)
    assert error in obs and reward == 0 and not term
    assert env.step('CALL get {"key": "a"}')[4]["result"] == {"key": "a", "value": 1}  # still usable


def test_a_tool_that_hangs_times_out_and_the_next_episode_is_clean():
    env = kv_env()
    env.reset(options={"task_index": 0})
    t0 = time.perf_counter()
    obs = env.step("CALL slow {}")[0]
    assert "did not return within 0.5 s" in obs and time.perf_counter() - t0 < 2.5
    assert "unavailable" in env.step("CALL keys {}")[0]
    assert env.step("ANSWER done")[1] == 0.0  # the reward cannot read a toolbox that is stuck
    task, steps = solve(env, 1)
    assert steps[-1][1] == 1.0


def test_non_object_results_are_wrapped():
    env = kv_env()
    env.reset(options={"task_index": 0})
    assert json.loads(env.step("CALL keys {}")[0]) == {"result": ["a"]}
    assert json.loads(env.step('CALL keys {"prefix": null}')[0]) == {"result": ["a"]}


def test_each_episode_has_its_own_toolbox():
    a, b = kv_env(), kv_env()
    a.reset(options={"task_index": 0})
    b.reset(options={"task_index": 0})
    a.step('CALL put {"key": "a", "value": 9}')
    assert b.step('CALL get {"key": "a"}')[4]["result"]["value"] == 1
    a.reset(options={"task_index": 0})
    assert a.step('CALL get {"key": "a"}')[4]["result"]["value"] == 1


class Ledger:
    """A toolbox holding an sqlite3 connection, which only its creating thread may use."""

    def __init__(self, task: ToolTask) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE t (x INTEGER)")

    def add(self, x: int) -> dict:
        """Add a row.

        Args:
            x: the value
        """
        self.db.execute("INSERT INTO t VALUES (?)", (x,))
        return {"rows": self.db.execute("SELECT COUNT(*) FROM t").fetchone()[0]}

    def close(self) -> None:
        self.db.close()


def test_a_thread_bound_toolbox_works():
    env = make_tool_env(Ledger, TASKS, lambda task, ledger, answer: ledger.add(0)["rows"] == 2)
    env.reset(options={"task_index": 0})
    assert json.loads(env.step('CALL add {"x": 3}')[0]) == {"rows": 1}
    assert env.step("ANSWER ok")[1] == 1.0
    env.close()


def test_bad_definitions_fail_at_construction_with_a_clear_error():
    class NoArgsDoc:
        def __init__(self, task):
            pass

        def f(self, x: int) -> dict:
            """Does f."""

    with pytest.raises(ValueError, match="NoArgsDoc.f .*Args"):
        make_tool_env(NoArgsDoc, TASKS, reward)
    with pytest.raises(ValueError, match="has no tools"):
        make_tool_env(type("Empty", (), {"__init__": lambda self, task: None}), TASKS, reward)
    with pytest.raises(ValueError, match="no test task"):
        make_tool_env(KeyValue, TASKS[:1], reward, test_tasks=[])
    with pytest.raises(ValueError, match="JSON-able"):
        ToolTask("p", {"x": object()})
    with pytest.raises(ValueError, match="needs an oracle"):
        kv_env(hints=True)
    with pytest.raises(NotImplementedError, match="has no oracle"):
        env = kv_env()
        env.reset()
        env.oracle_turns()

    class Broken(KeyValue):
        def __init__(self, task):
            raise OSError("database is down")

    with pytest.raises(RuntimeError, match="Broken\\(task\\) raised OSError: database is down"):
        make_tool_env(Broken, TASKS, reward).reset()


def test_a_reward_that_raises_scores_zero_with_a_warning():
    env = make_tool_env(KeyValue, TASKS, lambda task, kv, answer: float(answer))
    env.reset(options={"task_index": 0})
    with pytest.warns(RuntimeWarning, match="reward raised ValueError"):
        _, r, term, _, info = env.step("ANSWER not a number")
    assert r == 0.0 and term and not info["success"]


# -- SelfSim over the user's env --------------------------------------------------------------------


@pytest.mark.parametrize("base", ["KeyValue-v0", kv_env(), kv_env])
@pytest.mark.parametrize("mode", ["replace", "wrap", "mixed"])
def test_selfsim_takes_an_id_an_instance_or_a_factory(tiny_lm, base, mode):
    env = SelfSimEnv(base, model=tiny_lm, mode=mode, max_result_tokens=16)
    assert env.family.name == "KeyValue" and len(env.bank) == 0  # no oracle: the bank starts empty
    check_env(env)
    made = gym.make("SelfSim-v0", base=base, model=tiny_lm, mode=mode, max_result_tokens=16)
    assert made.unwrapped.family.tools == env.family.tools


def test_replace_mode_never_calls_the_toolbox_during_the_episode(tiny_lm, scripted):
    env = SelfSimEnv("KeyValue-v0", model=scripted(['{"key": "k", "value": 5}']), mode="replace")
    obs, info = env.reset(options={"task_index": 2})
    i = env.task.data["i"]
    CALLS.clear()
    _, _, _, _, info = env.step(f'CALL put {{"key": "k{i}", "value": {i}}}')
    assert CALLS == [] and info["imagined"] and info["real_examples"] == 0
    assert env._backend is None  # not even constructed
    _, r, term, _, info = env.step("ANSWER done")
    assert CALLS == ["put"] and r == 1.0 and info["success"]  # scored on a replay of the agent's calls


def test_wrap_mode_reports_both_results_and_fidelity_and_fills_the_bank(tiny_lm, scripted):
    env = SelfSimEnv(kv_env(), model=scripted(['{"key": "a", "value": 2}']), mode="wrap")
    env.reset(options={"task_index": 0})
    _, _, _, _, info = env.step('CALL get {"key": "a"}')
    assert dict(info["real_result"]) == {"key": "a", "value": 1}
    assert info["fidelity"]["field_accuracy"] == 0.5 and info["real_examples"] == 0
    assert len(env.bank) == 1 and env.bank.shapes("get") == {frozenset({"key", "value"})}


def test_a_result_bank_round_trips_through_a_file(tmp_path, tiny_lm):
    env = SelfSimEnv(kv_env(), model=tiny_lm, mode="mixed", p_real=1.0)
    env.reset(options={"task_index": 0})
    env.step('CALL get {"key": "a"}')
    env.step('CALL put {"key": "b", "value": 3}')
    path = tmp_path / "bank.jsonl"
    env.bank.save(path)
    loaded = ResultBank.load(path)
    rng = np.random.default_rng(0)
    assert len(loaded) == 2 and loaded.shapes("put") == env.bank.shapes("put")
    assert loaded.examples("get", 1, rng) == env.bank.examples("get", 1, np.random.default_rng(0))
    again = SelfSimEnv("KeyValue-v0", model=tiny_lm, bank=str(path))
    assert len(again.bank) == 2
    (tmp_path / "bad.jsonl").write_text('{"tool": "get"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        ResultBank.load(tmp_path / "bad.jsonl")


def test_the_oracle_only_features_say_they_need_one(tiny_lm):
    with pytest.raises(ValueError, match="consistent"):
        SelfSimEnv("KeyValue-v0", model=tiny_lm, verifier="consistent")
    with pytest.raises(ValueError, match="no oracle"):
        SelfSimEnv("KeyValue-v0", model=tiny_lm, premise_redraws=1)
    with_oracle = make_tool_env(KeyValue, TASKS, reward, oracle=oracle)
    assert len(SelfSimEnv(with_oracle, model=tiny_lm, bank_tasks=3).bank) == 3  # one put per oracle run
    with pytest.raises(ValueError, match="tool env"):
        SelfSimEnv(lambda: "not an env", model=tiny_lm)


# -- vector envs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", [*ENV_IDS, "KeyValue-v0", "SelfSim-v0"])
def test_async_and_sync_vector_envs_return_the_observations_of_the_single_env(env_id):
    singles = [gym.make(env_id) for _ in range(2)]
    expected = [env.reset(seed=s)[0] for env, s in zip(singles, [3, 4], strict=True)]
    actions = ['CALL add {"a": 1, "b": 2}', "ANSWER 1"]  # SelfSim-v0 (on ToolCall-v0) imagines the first
    expected_steps = [env.step(a)[0] for env, a in zip(singles, actions, strict=True)]
    for mode in ("sync", "async"):
        vec = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode)
        try:
            obs, _ = vec.reset(seed=[3, 4])
            assert list(obs) == expected, mode
            obs, *_ = vec.step(actions)
            assert list(obs) == expected_steps, mode
        finally:
            vec.close()


# -- training on it -------------------------------------------------------------------------------


@pytest.mark.parametrize("rehearse", ["off", "replace"])
def test_ppo_trains_on_a_user_env_real_and_rehearsed(tiny_lm, rehearse):
    config = PPOConfig.from_flat(
        env="KeyValue-v0",
        iterations=1,
        tasks_per_iter=2,
        group_size=2,
        max_turns=2,
        epochs=1,
        minibatch_size=4,
        lr=1e-3,
        rehearse=rehearse,
    )
    lm = LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer)
    before = [p.detach().clone() for p in lm.model.parameters()]
    trainer = PPOTrainer(config, lm)
    row = trainer.train_iteration()
    assert trainer.family.name == "KeyValue" and row["losses/update_fraction"] == 1.0
    assert {trainer.family.task("train", o["task_index"]).template for o in trainer.last_options} <= {
        "t0",
        "t1",
        "t2",
    }
    assert any(not torch.equal(a, b) for a, b in zip(before, lm.model.parameters(), strict=True))


def test_the_example_runs_and_its_scripted_agent_solves_the_real_env():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "examples/bring_your_own_env.py", "--tasks", "6"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "real env 100%" in out.stdout and "imagined results (" in out.stdout
