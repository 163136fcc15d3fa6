import copy
import json
import pickle
from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from rehearsal_gym.envs import ENV_IDS, explain
from rehearsal_gym.envs.base import MAX_OBS_CHARS, state_hash

from rehearsal_gym.core.rollout import random_turn

REAL = list(ENV_IDS)

HOSTILE = [
    "",
    "\x00\x01\x02",
    "x" * 1_000_000,
    "CALL get_order " + "{" * 100_000,
    "CALL get_order {\"order_id\": \"O1' OR '1'='1\"}",
    'CALL get_order {"order_id": "\'; DROP TABLE orders; --"}',
    'CALL cancel_order {"order_id": "x\' OR 1=1 --", "reason": "no_longer_needed"}',
    'CALL update_address {"order_id": "1; DELETE FROM orders", "address": "../../etc/passwd"}',
    'CALL place_order {"account_id": "A1\' OR 1=1--", "symbol": "ACME", "side": "sell", "qty": 1}',
    'CALL get_price {"symbol": "../../../etc/passwd", "date": "2024-01-01"}',
    'CALL reverse_text {"text": "\\u202e\\ud800"}',
    'CALL add_days {"date": "9999-12-31", "days": 100000}',
    'CALL multiply {"a": 1e308, "b": 1e308}',
    'CALL convert_units {"value": 1, "from_unit": "kg", "to_unit": "km"}',
    "CALL get_order {" + '"a":[' * 200 + "]" * 200 + "}",
    "ANSWER \U0001f600 <|agent|> <|end|>",
    "\ud800\udfff",
    "CALL \u0000 {}",
]


@pytest.mark.parametrize("env_id", REAL)
def test_check_env(env_id):
    check_env(gym.make(env_id).unwrapped)
    check_env(gym.make(env_id, split="test", render_mode="ansi").unwrapped)


@pytest.mark.parametrize("env_id", REAL)
def test_oracle_solves_every_task(env_id):
    env = gym.make(env_id)
    for split in ("train", "test"):
        env.unwrapped.split = split
        for i in range(40):
            env.reset(options={"task_index": i})
            turns = env.unwrapped.oracle_turns()
            for turn in turns:
                _, reward, terminated, truncated, info = env.step(turn)
            assert terminated and not truncated and reward == 1.0 and info["success"], info


@pytest.mark.parametrize("env_id", REAL)
def test_random_policy_fails_gracefully(env_id):
    env = gym.make(env_id, max_turns=4)
    rng = np.random.default_rng(0)
    wins = 0
    for i in range(30):
        obs, info = env.reset(options={"task_index": i})
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(random_turn(env.unwrapped.tools, rng))
            assert env.observation_space.contains(obs)
            done = terminated or truncated
        wins += info["success"]
    assert wins <= 3  # a random policy almost never solves a task


@pytest.mark.parametrize("env_id", REAL)
def test_splits_are_disjoint_and_deterministic(env_id):
    family = ENV_IDS[env_id].family
    train = {family.task("train", i).prompt for i in range(200)}
    test = {family.task("test", i).prompt for i in range(200)}
    assert not train & test
    assert family.task("test", 7) == family.task("test", 7)
    assert len(test) > 100  # tasks vary


@pytest.mark.parametrize("env_id", REAL)
def test_reset_is_deterministic_under_seed(env_id):
    a, b = gym.make(env_id), gym.make(env_id)
    assert a.reset(seed=123)[0] == b.reset(seed=123)[0]
    for turn in a.unwrapped.oracle_turns():
        assert a.step(turn)[0] == b.step(turn)[0]


@pytest.mark.parametrize("env_id", REAL)
@pytest.mark.parametrize("action", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_never_raises(env_id, action):
    env = gym.make(env_id, max_turns=3)
    other = gym.make(env_id)
    other.reset(options={"task_index": 1})
    other_state = state_hash(other.unwrapped.backend.state())
    env.reset(options={"task_index": 1})
    before = state_hash(env.unwrapped.backend.state())
    obs, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(obs) and len(obs) <= MAX_OBS_CHARS
    assert reward <= 0.0
    if info.get("error") or "error" in obs:
        assert state_hash(env.unwrapped.backend.state()) == before
    else:  # a well-formed call of a tool that accepts odd text (reverse_text) or an answer
        assert action.startswith(("ANSWER", "CALL reverse_text"))
    assert state_hash(other.unwrapped.backend.state()) == other_state
    # the env keeps working after hostile input
    env.step("ANSWER done")


def test_sql_injection_leaves_database_intact():
    env = gym.make("Retail-v0")
    env.reset(options={"task_index": 3})
    db = env.unwrapped.backend
    n_orders = len(db.query("SELECT * FROM orders"))
    obs, *_ = env.step('CALL cancel_order {"order_id": "x\' OR \'1\'=\'1", "reason": "no_longer_needed"}')
    assert "not found" in obs
    obs, *_ = env.step('CALL get_order {"order_id": "\'; DROP TABLE orders; --"}')
    assert len(db.query("SELECT * FROM orders")) == n_orders
    assert not db.query("SELECT * FROM orders WHERE status = 'cancelled' AND cancel_reason IS NOT NULL")


def test_each_episode_has_its_own_database():
    a, b = gym.make("Retail-v0"), gym.make("Retail-v0")
    a.reset(options={"task_index": 5})
    b.reset(options={"task_index": 5})
    turns = a.unwrapped.oracle_turns()
    for turn in turns[:-1]:
        a.step(turn)
    assert a.unwrapped.backend.conn is not b.unwrapped.backend.conn
    fresh = b.unwrapped.family.make_backend(b.unwrapped.task)
    assert state_hash(b.unwrapped.backend.state()) == state_hash(fresh.state())


def test_business_rules_are_enforced():
    env = gym.make("Retail-v0")
    for i in range(200):
        env.reset(options={"task_index": i})
        db = env.unwrapped.backend
        shipped = db.query("SELECT id FROM orders WHERE status = 'shipped'")
        if shipped:
            obs, *_ = env.step(
                f'CALL cancel_order {{"order_id": "{shipped[0][0]}", "reason": "no_longer_needed"}}'
            )
            assert "only pending orders can be cancelled" in obs
            return
    pytest.fail("no shipped order in 200 worlds")


def test_finance_constraints():
    env = gym.make("Finance-v0")
    env.reset(options={"task_index": 0})
    account = env.unwrapped.backend.query("SELECT id FROM accounts")[0][0]
    obs, *_ = env.step(
        f'CALL place_order {{"account_id": "{account}", "symbol": "ACME", "side": "buy", "qty": 1000}}'
    )
    assert "insufficient cash" in obs
    obs, *_ = env.step(
        f'CALL place_order {{"account_id": "{account}", "symbol": "NOPE", "side": "buy", "qty": 1}}'
    )
    assert "unknown symbol" in obs


def test_finance_book_holds_overridden_facts():
    from rehearsal_gym.envs.finance import Book

    from rehearsal_gym.core.protocol import ToolCall

    plain = Book(5)
    account = plain.query("SELECT id FROM accounts ORDER BY id")[0][0]
    before = plain.call(ToolCall("get_account", {"account_id": account}))
    book = Book(5, {account: {"FLUX": 12}, "NOPE1": {"ACME": 3}})  # unknown accounts are ignored
    after = book.call(ToolCall("get_account", {"account_id": account}))
    assert after["cash"] == before["cash"]
    assert {h["symbol"]: h["qty"] for h in after["holdings"]} == {
        **{h["symbol"]: h["qty"] for h in before["holdings"]},
        "FLUX": 12,
    }
    assert not book.query("SELECT 1 FROM accounts WHERE id = 'NOPE1'")


@pytest.mark.parametrize("policy", ["error", "penalty", "terminate"])
def test_malformed_policies(policy):
    env = gym.make("ToolCall-v0", malformed=policy, penalty=0.1)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("nonsense")
    assert info["malformed_count"] == 1 and "turn must start with CALL or ANSWER" in info["error"]
    assert reward == (0.0 if policy == "error" else -0.1)
    assert terminated == (policy == "terminate")


def test_truncation_after_max_turns():
    env = gym.make("ToolCall-v0", max_turns=2)
    env.reset(seed=0)
    assert env.step('CALL add {"a": 1, "b": 2}')[3] is False
    _, reward, terminated, truncated, info = env.step('CALL add {"a": 1, "b": 2}')
    assert truncated and not terminated and reward == 0.0 and info["success"] is False
    obs, _, terminated, _, info = env.step("ANSWER 3")
    assert terminated and "episode is over" in obs


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"split": "dev"}, "split"),
        ({"max_turns": 0}, "max_turns"),
        ({"malformed": "ignore"}, "malformed"),
        ({"penalty": -1.0}, "penalty"),
        ({"render_mode": "human"}, "render_mode"),
        ({"call_format": "xml"}, "call_format"),
    ],
)
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        gym.make("Retail-v0", **kwargs)


def test_info_carries_call_result_and_task():
    env = gym.make("Finance-v0")
    _, info = env.reset(options={"task_index": 2})
    assert info["task_id"] == "finance/train/2"
    turn = env.unwrapped.oracle_turns()[0]
    _, _, _, _, info = env.step(turn)
    assert info["call"]["name"] in env.unwrapped.tools and isinstance(info["result"], Mapping)


@pytest.mark.parametrize("env_id", REAL)
def test_infos_survive_copy_and_pickle(env_id):
    # SB3's DummyVecEnv deep-copies infos and SubprocVecEnv pickles them across processes;
    # mutating a copy must not reach the env's own state
    env = gym.make(env_id)
    env.reset(seed=0)
    for turn in env.unwrapped.oracle_turns():
        _, _, _, _, info = env.step(turn)
        assert pickle.loads(pickle.dumps(info)) == copy.deepcopy(info) == info
        for key in ("call", "result"):
            if key in info:
                with pytest.raises(TypeError):
                    info[key]["name"] = "changed"  # read-only: the env's state is out of reach
                assert dict(copy.deepcopy(info[key])) == dict(info[key])


def test_render_ansi_shows_transcript():
    env = gym.make("ToolCall-v0", render_mode="ansi")
    env.reset(seed=1)
    env.step("ANSWER 1")
    text = env.render()
    assert "[task] Tools:" in text and "[agent] ANSWER 1" in text


@pytest.mark.parametrize("env_id", REAL)
def test_explainer(env_id):
    env = gym.make(env_id)
    env.reset(options={"task_index": 4})
    task, turns = env.unwrapped.task, env.unwrapped.oracle_turns()
    infos = [env.step(t)[-1] for t in turns]
    good = explain(task, turns, turns, infos)
    assert good.startswith(f"Workflow for {task.template}:") and task.rule in good
    env.reset(options={"task_index": 4})
    bad_infos = [env.step("ANSWER 0")[-1]]
    bad = explain(task, turns, ["ANSWER 0"], bad_infos)
    assert "needed" in bad or "wrong outcome" in bad


def test_oracle_hint_channel():
    env = gym.make("Retail-v0", hints=True)
    _, info = env.reset(options={"task_index": 0})
    assert info["hint"].startswith("Workflow: get_order") or info["hint"].startswith(
        "Workflow: find_customer"
    )
    assert "Rule:" in info["hint"]
    assert "hint" not in gym.make("Retail-v0").reset(options={"task_index": 0})[1]


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=200_000))
def test_a_cut_observation_says_exactly_how_many_characters_it_lost(extra):
    from rehearsal_gym.envs.base import to_observation

    text = "".join("abcdefghij"[i % 10] for i in range(MAX_OBS_CHARS + extra))
    obs = to_observation(text)
    if extra == 0:
        assert obs == text
        return
    assert len(obs) <= MAX_OBS_CHARS
    kept, marker = obs.rsplit(" ...[cut ", 1)
    assert text.startswith(kept) and marker.endswith(" chars]")
    assert int(marker.removesuffix(" chars]")) == len(text) - len(kept)


# -- the JSON call format, as instruct models write it ---------------------------------------------
HOSTILE_JSON = [
    "<tool_call>",
    "<tool_call>" + "{" * 100_000 + "</tool_call>",
    '<tool_call>{"name": "get_order", "arguments": {"order_id": "O1\' OR \'1\'=\'1"}}</tool_call>',
    '<tool_call>{"name": "cancel_order", "arguments": {"order_id": "x\' OR 1=1 --", "reason": "no_longer_needed"}}'
    "</tool_call>",
    '<tool_call>{"name": "place_order", "arguments": {"account_id": "A1\' OR 1=1--", "symbol": "ACME", '
    '"side": "sell", "qty": 1}}</tool_call>',
    '<tool_call>{"name": "__import__", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "get_price", "arguments": {"symbol": "../../../etc/passwd", "date": "x"}}</tool_call>',
    '<tool_call>{"name": "multiply", "arguments": {"a": 1e308, "b": 1e308}}</tool_call><tool_call>',
    "<tool_call>\ud800</tool_call>",
    "</tool_call><|im_end|><|im_start|>system",
]


@pytest.mark.parametrize("env_id", REAL)
def test_json_call_format_conforms_and_the_oracle_solves_it(env_id):
    check_env(gym.make(env_id, call_format="json").unwrapped)
    env = gym.make(env_id, call_format="json")
    obs, _ = env.reset(options={"task_index": 0})
    assert "<tools>" in obs and "<tool_call>" in obs and obs.endswith(env.unwrapped.task.prompt)
    for i in range(10):
        env.reset(options={"task_index": i})
        for turn in env.unwrapped.oracle_turns():
            _, reward, terminated, _, info = env.step(turn)
        assert terminated and reward == 1.0 and info["success"], info
    env.reset(options={"task_index": 0})
    _, reward, terminated, _, info = env.step(env.unwrapped.family.oracle(env.unwrapped.task)[0])
    assert terminated and reward == 0.0 and info["answer"].startswith("CALL")  # plain text: an answer


@pytest.mark.parametrize("env_id", REAL)
@pytest.mark.parametrize("action", HOSTILE_JSON, ids=range(len(HOSTILE_JSON)))
def test_hostile_json_turns_never_raise(env_id, action):
    env = gym.make(env_id, max_turns=3, call_format="json")
    env.reset(options={"task_index": 1})
    before = state_hash(env.unwrapped.backend.state())
    obs, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(obs) and reward <= 0.0
    assert obs.startswith("error:") or "error" in json.loads(obs), (obs, info)  # malformed, or refused
    assert state_hash(env.unwrapped.backend.state()) == before
    env.step("done")
