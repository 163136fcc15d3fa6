"""SEED's skills: the policy as analyst of its own trajectories, and the skill library.

A finished episode is shown to the model in an *analyst* prompt (the request, the agent's turns,
the outcome); the model answers with one short JSON skill after ``<|skill|>``::

    {"kind": "workflow", "rule": "Workflow for cancel_order: find_customer -> ... -> ANSWER."}
    {"kind": "avoid", "rule": "Turn 2: did get_order but the task needed list_orders."}

a workflow for a success, an avoidance rule for a failure. `label_skill` makes the supervised
labels for the analyst warm start from the envs' explainers (`rehearsal_gym.envs.explain`);
`parse_skill` reads the model's answer strictly (anything else is no skill). `SkillLibrary`
keeps, per task family and template, the best-supported skills; the trainer inserts the best one
as a ``<|skill|>`` turn before the conversation when it re-scores the agent's actions (teacher).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rehearsal_gym.envs.explain import explain

KINDS = ("workflow", "avoid")
MAX_RULE_CHARS = 200
MAX_SHOWN_TURN_CHARS = 120


@dataclass(frozen=True)
class Skill:
    kind: str  # "workflow" (what worked) or "avoid" (the mistake and its warning sign)
    rule: str

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "rule": self.rule}, ensure_ascii=True)

    def hint(self) -> str:
        """The text inserted as the ``<|skill|>`` turn."""
        return ("Do: " if self.kind == "workflow" else "Avoid: ") + self.rule


def analyst_prompt(request: str, actions: Sequence[str], success: bool) -> str:
    """The analyst's view of a finished episode (the text of its ``<|task|>`` turn)."""
    shown = [a if len(a) <= MAX_SHOWN_TURN_CHARS else a[:MAX_SHOWN_TURN_CHARS] + "..." for a in actions]
    turns = " | ".join(f"{i + 1}. {a}" for i, a in enumerate(shown)) or "(no turns)"
    outcome = "success" if success else "failure"
    return f"Analyse this episode and write one skill as JSON.\nRequest: {request}\nTurns: {turns}\nOutcome: {outcome}"


def label_skill(task, oracle_turns: Sequence[str], actions: Sequence[str], infos: Sequence[Mapping]) -> Skill:
    """The supervised label of the analyst: the env's explanation of the episode as a skill."""
    success = bool(infos and infos[-1].get("success"))
    rule = explain(task, oracle_turns, actions, infos)
    return Skill("workflow" if success else "avoid", rule[:MAX_RULE_CHARS])


def parse_skill(text: str) -> Skill | None:
    """A skill from the analyst's answer, or None when it is not exactly the JSON asked for."""
    if not isinstance(text, str) or len(text) > 4 * MAX_RULE_CHARS:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or set(data) != {"kind", "rule"}:
        return None
    kind, rule = data["kind"], data["rule"]
    if kind not in KINDS or not isinstance(rule, str) or not rule.strip() or len(rule) > MAX_RULE_CHARS:
        return None
    return Skill(kind, rule.strip())


@dataclass
class _Entry:
    skill: Skill
    support: int = 0  # how many analyses produced this skill
    wins: int = 0  # of those, how many analysed a successful episode


@dataclass
class SkillLibrary:
    """Skills per (family, template), best-supported first; at most `capacity` kept per key.

    A skill's score is its support plus its wins (a workflow seen in successes outranks a
    rule seen once); ties keep the older skill first. A new skill replaces the weakest one when
    the key is full, so the library keeps evolving with the policy."""

    capacity: int = 4
    entries: dict[tuple[str, str], list[_Entry]] = field(default_factory=dict)

    def add(self, family: str, template: str, skill: Skill, success: bool) -> None:
        bucket = self.entries.setdefault((family, template), [])
        for entry in bucket:
            if entry.skill == skill:
                break
        else:
            if len(bucket) >= self.capacity:  # a new skill takes the weakest one's place
                bucket.pop()
            entry = _Entry(skill)
            bucket.append(entry)
        entry.support += 1
        entry.wins += int(success)
        bucket.sort(key=lambda e: -(e.support + e.wins))  # stable: ties keep insertion order

    def best(self, family: str, template: str) -> Skill | None:
        bucket = self.entries.get((family, template))
        return bucket[0].skill if bucket else None

    def __len__(self) -> int:
        return sum(len(b) for b in self.entries.values())

    def to_dict(self) -> dict:
        return {
            "capacity": self.capacity,
            "entries": [
                [family, template, [[e.skill.kind, e.skill.rule, e.support, e.wins] for e in bucket]]
                for (family, template), bucket in self.entries.items()
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> SkillLibrary:
        library = cls(capacity=int(data["capacity"]))
        for family, template, bucket in data["entries"]:
            library.entries[(family, template)] = [
                _Entry(Skill(kind, rule), support, wins) for kind, rule, support, wins in bucket
            ]
        return library
