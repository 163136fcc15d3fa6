import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from rehearsal_gym.envs import REAL_ENV_IDS
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from rehearsal_gym.adapters.token_env import TokenEnv
from rehearsal_gym.core.grammar import TokenMasker, TurnGrammar
from rehearsal_gym.core.protocol import FinalAnswer, ParseError, ToolCall, format_call, parse_turn
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv


def tools_of(env_id):
    env = gym.make(env_id, split="train")
    env.reset(options={"task_index": 0})
    return env, env.unwrapped.tools


@pytest.mark.parametrize("env_id", REAL_ENV_IDS)
def test_grammar_accepts_every_oracle_turn(env_id):
    env, tools = tools_of(env_id)
    grammar = TurnGrammar(tools)
    for i in range(40):
        env.reset(options={"task_index": i})
        for turn in env.unwrapped.oracle_turns():
            assert grammar.accepts(turn), turn


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80))
def test_grammar_accepts_only_turns_that_parse(text):
    _, tools = tools_of("Retail-v0")
    for candidate in (
        text,
        "ANSWER " + text,
        "CALL get_order " + text,
        'CALL get_order {"order_id": ' + text,
    ):
        if TurnGrammar(tools).accepts(candidate):
            assert not isinstance(parse_turn(candidate, tools), ParseError), candidate


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(-5, 5) | st.text(max_size=5), max_size=3)
)
def test_grammar_matches_the_schema_on_generated_calls(arguments):
    _, tools = tools_of("ToolCall-v0")
    text = format_call("add", arguments)
    parsed = parse_turn(text, tools)
    accepted = TurnGrammar(tools).accepts(text)
    if accepted:
        assert isinstance(parsed, ToolCall)
    # canonical calls that the protocol accepts with number arguments are accepted by the grammar
    if isinstance(parsed, ToolCall) and all(isinstance(v, int) for v in arguments.values()):
        assert accepted


@pytest.mark.parametrize("env_id", REAL_ENV_IDS)
def test_masked_random_turns_always_parse(env_id, tiny_lm):
    """Random walks that follow the masks: every token is allowed by the grammar, every finished
    turn parses as a call or an answer (zero protocol errors)."""
    env, tools = tools_of(env_id)
    grammar, masker = TurnGrammar(tools), TokenMasker.from_codec(tiny_lm.codec)
    rng = np.random.default_rng(0)
    finished = 0
    for _ in range(60):
        state, tokens = grammar.initial(), []
        for _ in range(60):
            mask = masker.mask(grammar, state)
            assert mask.any()
            if mask[tiny_lm.end_id] and rng.random() < 0.4:
                break
            token = int(rng.choice(np.flatnonzero(mask)))
            if token == tiny_lm.end_id:
                break
            state = masker.advance(grammar, state, token)
            assert state is not None
            tokens.append(token)
        if grammar.complete(state):
            finished += 1
            assert isinstance(parse_turn(tiny_lm.decode(tokens), tools), ToolCall | FinalAnswer)
    assert finished >= 30


def test_token_env_passes_gymnasium_and_sb3_checkers(tiny_lm):
    env = TokenEnv("Retail-v0", tiny_lm, window=512, max_turn_tokens=48)
    gym_check_env(env, skip_render_check=True)
    sb3_check_env(env)


def test_selfsim_token_env_passes_checkers(tiny_lm):
    env = TokenEnv(
        SelfSimEnv("Finance-v0", model=tiny_lm, mode="replace", max_result_tokens=24, bank_tasks=8),
        tiny_lm,
        window=512,
        max_turn_tokens=48,
    )
    gym_check_env(env, skip_render_check=True)
    sb3_check_env(env)


def test_token_env_plays_the_oracle_to_success(tiny_lm):
    env = TokenEnv("Finance-v0", tiny_lm, window=768)
    obs, _ = env.reset(seed=0, options={"task_index": 3})
    reward, info = 0.0, {}
    for turn in env.env.unwrapped.oracle_turns():
        ids = [*tiny_lm.encode(turn), tiny_lm.end_id]
        for token in ids:
            assert env.action_masks()[token], (turn, tiny_lm.decode([token]))
            obs, reward, terminated, truncated, info = env.step(token)
        assert info["turn_text"] == turn
    assert terminated and info["success"] and reward == 1.0
    n = int(obs["attention_mask"].sum())
    assert obs["input_ids"][n - 1] == tiny_lm.end_id and (obs["input_ids"][n:] == tiny_lm.pad_id).all()


def test_turn_cap_sends_the_turn_and_context_overflow_truncates(tiny_lm):
    env = TokenEnv("ToolCall-v0", tiny_lm, window=400, max_turn_tokens=8)
    obs, _ = env.reset(seed=0)
    space = tiny_lm.encode(" ")[0]
    steps, done, info = 0, False, {}
    while not done:
        obs, reward, terminated, truncated, info = env.step(space)  # never a valid turn
        steps += 1
        done = terminated or truncated
        assert obs["attention_mask"].sum() <= 400
    assert steps % 8 == 0 and "error" in info  # each 8-token turn was sent, and was malformed
    # the episode ended by the turn limit or by the window overflowing, and says which
    text_env = env.env.unwrapped
    assert truncated and (info.get("context_overflow") or text_env.turn >= text_env.max_turns)


def test_invalid_configs_and_actions_name_the_problem(tiny_lm):
    with pytest.raises(ValueError, match="window"):
        TokenEnv("ToolCall-v0", tiny_lm, window=10, max_turn_tokens=48)
    with pytest.raises(ValueError, match="max_turn_tokens"):
        TokenEnv("ToolCall-v0", tiny_lm, max_turn_tokens=0)
    env = TokenEnv("ToolCall-v0", tiny_lm, window=100, max_turn_tokens=48)
    with pytest.raises(ValueError, match="too small"):
        env.reset(seed=0)
    env = TokenEnv("ToolCall-v0", tiny_lm)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="token id"):
        env.step(10**9)


def test_unmasked_garbage_tokens_never_crash(tiny_lm):
    env = TokenEnv("Retail-v0", tiny_lm, window=512, max_turn_tokens=16)
    rng = np.random.default_rng(1)
    for episode in range(3):
        env.reset(seed=episode)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            done = terminated or truncated
            mask = env.action_masks()
            assert mask.dtype == bool and mask.any()
