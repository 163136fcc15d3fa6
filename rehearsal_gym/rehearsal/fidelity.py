"""How faithful is the environment role? Fidelity of imagined results and the rehearsal gap.

Per family: the same policy plays held-out tasks (1) in SelfSimEnv's wrap mode, where it sees
imagined results while the real tool also runs, giving per-call exact match, field accuracy and
hallucinated-field rate, and success in rehearsal under both verifiers (the real one, and the
consistent one that scores the agent in the world it was shown; NaN for families whose oracle
cannot re-plan, such as a user's `make_tool_env`); (2) in the real env. The rehearsal gap is success
in rehearsal (the consistent verifier where there is one, else the real one) minus success in the
real env.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rehearsal_gym.core.model import LM
from rehearsal_gym.core.rollout import evaluate, run_episodes
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv, base_env


def measure_fidelity(
    lm: LM,
    base: str,
    n_tasks: int,
    *,
    split: str = "test",
    batch_size: int = 16,
    temperature: float = 1.0,
    by_template: bool = False,
) -> list[dict[str, Any]]:
    """Fidelity metrics and rehearsal gap of `lm` (as greedy agent and as environment role sampled
    at `temperature`) on one family: one row for the family (template "all"), then, with
    `by_template`, one row per task template (where the gap says which workflows rehearsal
    rewards differently from the real env)."""
    # the consistent verifier where the family can re-plan its oracle (the built-in ones), else the real one
    consistent = base_env(base).family.can_replan
    verifier = "consistent" if consistent else "real"
    envs = [
        SelfSimEnv(base, model=lm, mode="wrap", split=split, verifier=verifier, temperature=temperature)
        for _ in range(min(batch_size, n_tasks))
    ]
    episodes: list[dict[str, Any]] = []
    for start in range(0, n_tasks, len(envs)):
        idx = list(range(start, min(start + len(envs), n_tasks)))
        for ep in run_episodes(lm, envs[: len(idx)], [{"task_index": i} for i in idx], seed=start):
            imagined = [info for info in ep.infos if info.get("imagined")]
            episodes.append(
                {
                    "template": ep.template,
                    "success": ep.success,
                    "real_verifier": bool(
                        ep.infos and ep.infos[-1].get("real_verifier_success", ep.success and not consistent)
                    ),
                    "world_error": bool(
                        imagined and "error" in imagined[-1] and "environment role" in imagined[-1]["error"]
                    ),
                    "imagined": len(imagined),
                    "calls": [info["fidelity"] for info in imagined if "fidelity" in info],
                }
            )
    real = evaluate(lm, base, n_tasks, split=split)
    rows = [_summary(base, "all", episodes, real["success"], temperature, consistent)]
    if by_template:
        for template, success in real["per_template"].items():
            group = [e for e in episodes if e["template"] == template]
            rows.append(_summary(base, template, group, success, temperature, consistent))
    return rows


def _summary(
    base: str,
    template: str,
    episodes: list[dict[str, Any]],
    real: float,
    temperature: float,
    consistent: bool,
) -> dict[str, Any]:
    calls = [c for e in episodes for c in e["calls"]]
    imagined = sum(e["imagined"] for e in episodes)

    def mean(values: list) -> float:
        return float(np.mean(values)) if values else 0.0

    rehearsed = mean([e["success"] if consistent else e["real_verifier"] for e in episodes])
    return {
        "env": base,
        "template": template,
        "tasks": len(episodes),
        "world temperature": f"{temperature:g}",
        "imagined calls": imagined,
        "invalid results": (imagined - len(calls)) / max(imagined, 1),
        "episodes ended by the world": mean([e["world_error"] for e in episodes]),
        "exact match": mean([c["exact"] for c in calls]),
        "field accuracy": mean([c["field_accuracy"] for c in calls]),
        "hallucinated fields": mean([c["hallucinated_fields"] for c in calls]),
        "success in rehearsal, real verifier": mean([e["real_verifier"] for e in episodes]),
        "success in rehearsal, consistent verifier": rehearsed if consistent else float("nan"),
        "success in real env": real,
        "rehearsal gap": rehearsed - real,
    }
