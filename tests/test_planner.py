import copy

import gymnasium as gym
import pytest
from rehearsal_gym.envs.base import to_observation

from rehearsal_gym.core.rollout import run_episodes
from rehearsal_gym.rehearsal.planner import RehearsalConfig, RehearsalPlanner, answer_key, vote


def test_budget_zero_is_the_greedy_policy(tiny_lm):
    planner = RehearsalPlanner(tiny_lm, "ToolCall-v0", RehearsalConfig(n=0, max_turn_tokens=24))
    env = gym.make("ToolCall-v0", split="test", max_turns=2)
    planned = planner.run_episode(env, {"task_index": 0})
    greedy = run_episodes(
        tiny_lm, [gym.make("ToolCall-v0", split="test", max_turns=2)], [{"task_index": 0}], max_turn_tokens=24
    )[0]
    assert env.unwrapped.transcript[1][1] == to_observation(greedy.actions[0])
    assert planned == greedy.success and planner.rehearsals == 0


def test_rehearsal_runs_and_never_touches_the_real_env_while_rehearsing(tiny_lm):
    config = RehearsalConfig(n=2, horizon=2, max_turn_tokens=16)
    planner = RehearsalPlanner(tiny_lm, "Retail-v0", config)
    env = gym.make("Retail-v0", split="test", max_turns=2)
    real_steps = []
    step = env.unwrapped.step
    env.unwrapped.step = lambda action: real_steps.append(action) or step(action)
    planner.run_episode(env, {"task_index": 1})
    decisions = len(real_steps)  # one committed action per decision reached the real env, no more
    assert decisions >= 1 and [a for role, a in env.unwrapped.transcript if role == "agent"] == [
        to_observation(a) for a in real_steps
    ]
    # every candidate of every decision is rehearsed, in the SelfSimEnvs only
    assert planner.rehearsals == config.n * decisions == config.n * planner.stats["decisions"]
    assert planner.stats["generated"] >= config.n * decisions  # the candidates at least


def _first_decision(env_id="ToolCall-v0", index=0):
    env = gym.make(env_id, split="test")
    env.reset(options={"task_index": index})
    return env.unwrapped, list(env.unwrapped.transcript)


def _scripted(planner, first: str, samples: list[str]):
    """Candidates as given: the planner's own sampling replaced by a script."""

    def act(contexts, greedy):
        planner.stats["generated"] += len(contexts)
        return [first] if greedy else samples[: len(contexts)]

    planner._act = act


def test_a_rehearsal_ends_in_its_answer_or_fails(tiny_lm):
    planner = RehearsalPlanner(tiny_lm, "ToolCall-v0", RehearsalConfig(n=3, horizon=2, max_turn_tokens=8))
    base, _ = _first_decision()
    answer = base.oracle_turns()[-1]
    assert answer == "ANSWER 423.2283"
    outcomes = planner.rehearse_all(base.task, [], [answer, "not a turn at all", answer + "."])
    assert outcomes == ["423.2283", None, "423.2283"]
    assert planner.rehearsals == 3


def test_identical_candidates_meet_the_same_imagined_world(tiny_lm):
    planner = RehearsalPlanner(tiny_lm, "ToolCall-v0", RehearsalConfig(n=2, horizon=1, max_turn_tokens=8))
    base, _ = _first_decision()
    call = base.oracle_turns()[0]
    planner.rehearse_all(base.task, [], [call, call])
    first, second = (sim.transcript for sim in planner.sims[:2])
    assert first == second and first[-2][1] == to_observation(call)


@pytest.mark.parametrize(
    "rule, samples, pick",
    [
        ("vote", ["ANSWER 7", "ANSWER 7"], 1),  # the greedy answer is outvoted
        ("vote", ["ANSWER 7", "ANSWER 5"], 0),  # 2 to 1 for the greedy answer
        ("vote", ["oops", "ANSWER 7"], 0),  # a tie keeps the earlier candidate
        ("first-pass", ["ANSWER 7", "ANSWER 7"], 0),
    ],
)
def test_the_rule_decides_which_candidate_is_executed(tiny_lm, rule, samples, pick):
    planner = RehearsalPlanner(tiny_lm, "ToolCall-v0", RehearsalConfig(n=3, rule=rule))
    _scripted(planner, "ANSWER 5", samples)
    base, transcript = _first_decision()
    candidates = ["ANSWER 5", *samples]
    assert planner.choose(base.task, transcript, []) == candidates[pick]
    assert planner.stats["changed"] == (candidates[pick] != "ANSWER 5")
    assert planner.stats["decisions"] == 1 and planner.rehearsals == 3


def test_the_greedy_candidate_stands_when_no_rehearsal_passes(tiny_lm):
    planner = RehearsalPlanner(tiny_lm, "ToolCall-v0", RehearsalConfig(n=3))
    _scripted(planner, "bad turn", ["worse turn", "CALL nope {}"])
    base, transcript = _first_decision()
    assert planner.choose(base.task, transcript, []) == "bad turn" and planner.stats["changed"] == 0


def test_vote_and_answer_key():
    assert vote([None, None]) is None
    assert vote(["a", "b", "b", None]) == 1
    assert vote([None, "a", "b"]) == 1
    assert answer_key("ANSWER:  Tuesday.") == answer_key("answer tuesday") == "answer tuesday"
    assert answer_key("ANSWER 423.2283") == "answer 423.2283"


def test_a_separate_world_model_plays_the_environment_role(tiny_lm):
    world = tiny_lm.with_model(copy.deepcopy(tiny_lm.model))
    planner = RehearsalPlanner(tiny_lm, "ToolCall-v0", RehearsalConfig(n=2), world=world)
    assert planner.sim.lm is world and planner.lm is tiny_lm


def test_branch_from_real_history(tiny_lm):
    planner = RehearsalPlanner(tiny_lm, "Finance-v0", RehearsalConfig(n=1))
    env = gym.make("Finance-v0")
    env.reset(options={"task_index": 3})
    turn = env.unwrapped.oracle_turns()[0]
    obs = env.step(turn)[0]
    sim = planner.sim
    sim_obs, info = sim.reset(options={"task": env.unwrapped.task, "history": [(turn, obs)]})
    assert sim_obs == obs and info["turn"] == 1 and sim.transcript == env.unwrapped.transcript


def test_config_validation():
    with pytest.raises(ValueError, match="n must"):
        RehearsalConfig(n=-1)
    with pytest.raises(ValueError, match="horizon"):
        RehearsalConfig(horizon=0)
    with pytest.raises(ValueError, match="rule"):
        RehearsalConfig(rule="best")
