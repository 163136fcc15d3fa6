"""Oracle demonstrations: recorded real episodes, turned into token sequences for both roles.

Agent-role sequences train behaviour cloning (loss on the agent's tokens); environment-role
sequences train next-result prediction of *real* tool results (loss on the result tokens).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from rehearsal_gym.core.model import LM
from rehearsal_gym.core.protocol import ToolCall, ToolSpec, parse_turn
from rehearsal_gym.envs.base import Family, ToolEnv
from rehearsal_gym.rehearsal.roles import ResultBank, env_role_prompt


@dataclass
class Demo:
    """A recorded real episode: the transcript as (role, text) and where the calls are."""

    env_id: str
    task_id: str
    tools: dict[str, ToolSpec]
    transcript: list[tuple[str, str]]
    call_turns: list[tuple[int, ToolCall]]  # (index of the agent message in transcript, call)
    template: str = ""  # the task's template (e.g. "refund")


def record_oracle_episodes(
    env_id: str | Family, task_indices: Iterable[int], split: str = "train"
) -> list[Demo]:
    """Run the oracle on the given tasks of a real env (an id, or a family) and record each transcript."""
    import rehearsal_gym  # noqa: F401 - registers the env ids

    if isinstance(env_id, Family):
        env = ToolEnv(split=split, family=env_id, max_turns=10_000)  # the oracle ends its episodes
        env_id = env_id.name
    else:
        env = gym.make(env_id, split=split)
    if not env.unwrapped.family.has_oracle:
        env.close()
        raise ValueError(f"{env.unwrapped.family.name} has no oracle to record demonstrations from")
    demos = []
    try:
        for index in task_indices:
            env.reset(options={"task_index": int(index)})
            base = env.unwrapped
            for turn in base.oracle_turns():
                env.step(turn)
            transcript = list(base.transcript[:-1])  # drop the closing "episode finished" note
            calls = []
            for j, (role, text) in enumerate(transcript):
                parsed = parse_turn(text, base.tools, base.call_format) if role == "agent" else None
                if isinstance(parsed, ToolCall):
                    calls.append((j, parsed))
            demos.append(
                Demo(env_id, base.task.task_id, dict(base.tools), transcript, calls, base.task.template)
            )
    finally:
        env.close()
    return demos


def result_bank(demos: Sequence[Demo]) -> ResultBank:
    bank = ResultBank()
    for demo in demos:
        for j, call in demo.call_turns:
            bank.add(call, demo.transcript[j + 1][1])
    return bank


def seed_bank(family: Family, n_tasks: int = 40) -> ResultBank:
    """The real results an environment role starts from: the oracle's on `n_tasks` train tasks when
    the family has an oracle, else an empty bank (filled by real calls in wrap/mixed mode, or
    loaded from a file with `ResultBank.load`)."""
    if not family.has_oracle or n_tasks == 0:
        return ResultBank()
    return result_bank(record_oracle_episodes(family, range(n_tasks)))


def env_role_prompts(demo: Demo, bank: ResultBank, rng: np.random.Generator, k: int = 1):
    """(prompt, real result) pairs for each call of a demo, with k real examples of the tool."""
    pairs = []
    for j, call in demo.call_turns:
        examples = bank.examples(call.name, k, rng, exclude=demo.transcript[j][1])
        pairs.append(
            (env_role_prompt(demo.tools, call, demo.transcript[:j], examples), demo.transcript[j + 1][1])
        )
    return pairs


def corpus_texts(demos: Sequence[Demo], seed: int = 0) -> list[str]:
    """All text of the demos, for tokenizer training."""
    bank, rng = result_bank(demos), np.random.default_rng(seed)
    texts = [text for d in demos for _, text in d.transcript]
    texts += [prompt for d in demos for prompt, _ in env_role_prompts(d, bank, rng)]
    return texts


def agent_sequence(lm: LM, demo: Demo) -> tuple[list[int], list[int]]:
    """Token ids of a demo conversation and the mask of the agent's tokens (text + end), built as
    a rollout builds them (`core.rollout.run_episodes`)."""
    ids, mask = list(lm.start), [0] * len(lm.start)
    for role, text in demo.transcript:
        if role == "agent":
            head, body = lm.prompt("agent"), [*lm.encode(text), lm.end_id]
            ids += head + body + lm.close
            mask += [0] * len(head) + [1] * len(body) + [0] * len(lm.close)
        else:
            turn = lm.turn(role, text)
            ids += turn
            mask += [0] * len(turn)
    return ids, mask


def env_role_sequence(lm: LM, prompt: str, result: str) -> tuple[list[int], list[int]]:
    """Environment-role prompt then the real result; the mask covers the result and end token."""
    head = lm.start + lm.turn("sim", prompt) + lm.prompt("env")
    tail = lm.encode(result) + [lm.end_id]
    return head + tail, [0] * len(head) + [1] * len(tail)


_ENTITY_RE = re.compile(r"[A-Za-z]*\d[\w.@-]*|[a-z]+\.[a-z]+@[a-z.]+|[A-Z]{3,}")
_WORD_RE = re.compile(r"\b[A-Za-z]{3,}\b")  # words of tool results (statuses, weekdays, products)


DRILL_KINDS = ("repeat", "lookup")


def copy_drills(
    lm: LM,
    demos: Sequence[Demo],
    n: int,
    rng: np.random.Generator,
    kinds: Sequence[str] = DRILL_KINDS,
) -> list[tuple[list[int], list[int]]]:
    """Short synthetic copy exercises: repeat a list of values, or look a field up in a JSON object.

    Tool use is mostly copying values (an order id from the request into a call, a status from a
    result into the answer). A tiny model learns that skill (induction heads, key lookup) far
    sooner from dense short drills than from whole episodes. Values and keys come from the demos'
    own text, plus fresh random digit strings so that no particular value is memorised. With both
    `kinds` the drills alternate (repeat first); with one kind, all are of that kind (a lookup falls
    back to a repeat when the demos' results have fewer than two keys).
    """
    unknown = set(kinds) - set(DRILL_KINDS)
    if not kinds or unknown:
        raise ValueError(f"copy_drills kinds must be a non-empty subset of {DRILL_KINDS}, got {kinds!r}")
    pool = sorted(
        {m for d in demos for _, text in d.transcript for m in _ENTITY_RE.findall(text)}
        | {w for d in demos for role, text in d.transcript if role == "env" for w in _WORD_RE.findall(text)}
    )
    if not pool:
        return []
    keys = sorted(
        {k for d in demos for role, text in d.transcript if role == "env" for k in _result_keys(text)}
    )

    def item() -> str:
        if rng.random() < 0.3:
            return "".join(map(str, rng.integers(0, 10, size=int(rng.integers(2, 8)))))
        return pool[int(rng.integers(len(pool)))]

    drills = []
    for i in range(n):
        lookup = "lookup" in kinds and ("repeat" not in kinds or i % 2 == 1)
        if not lookup or len(keys) < 2:  # repeat a list of values
            items = [item() for _ in range(int(rng.integers(2, 7)))]
            head = lm.turn("task", "Repeat: " + ", ".join(items))
            answer = " ".join(items)
        else:  # look a field up in a JSON object shaped like the tools' results
            chosen = [keys[int(k)] for k in rng.permutation(len(keys))[: int(rng.integers(2, 6))]]
            obj = {k: item() for k in chosen}
            key = chosen[int(rng.integers(len(chosen)))]
            head = lm.turn("env", json.dumps(obj)) + lm.turn("task", f"Value of {key}?")
            answer = obj[key]
        head = lm.start + head + lm.prompt("agent")
        tail = lm.encode(answer) + [lm.end_id]
        drills.append((head + tail, [0] * len(head) + [1] * len(tail)))
    return drills


def _result_keys(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return []
    return [k for k in value if k != "error"] if isinstance(value, dict) else []
