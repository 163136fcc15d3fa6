"""How faithful is the environment role? Fidelity of imagined results and the rehearsal gap.

Per family: the same policy plays held-out tasks (1) in SelfSimEnv's wrap mode, where it sees
imagined results while the real tool also runs, giving per-call exact match, field accuracy and
hallucinated-field rate, and success in rehearsal under both verifiers (the real one, and the
consistent one that scores the agent in the world it was shown); (2) in the real env. The rehearsal
gap is success in rehearsal (consistent verifier) minus success in the real env.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .model import LM
from .rollout import evaluate, run_episodes
from .selfsim import SelfSimEnv


def measure_fidelity(
    lm: LM, base: str, n_tasks: int, *, split: str = "test", batch_size: int = 16
) -> dict[str, Any]:
    """Fidelity metrics and rehearsal gap of `lm` (as agent and environment role) on one family."""
    envs = [
        SelfSimEnv(base, model=lm, mode="wrap", split=split, verifier="consistent")
        for _ in range(min(batch_size, n_tasks))
    ]
    per_call: list[dict[str, float]] = []
    invalid, imagined, successes, real_verifier = 0, 0, [], []
    for start in range(0, n_tasks, len(envs)):
        idx = list(range(start, min(start + len(envs), n_tasks)))
        for ep in run_episodes(lm, envs[: len(idx)], [{"task_index": i} for i in idx], seed=start):
            successes.append(ep.success)
            real_verifier.append(bool(ep.infos and ep.infos[-1].get("real_verifier_success", False)))
            for info in ep.infos:
                if info.get("imagined"):
                    imagined += 1
                    if "fidelity" in info:
                        per_call.append(info["fidelity"])
                    else:
                        invalid += 1
    real = evaluate(lm, base, n_tasks, split=split)["success"]
    rehearsed = float(np.mean(successes)) if successes else 0.0

    def mean(key: str) -> float:
        return float(np.mean([c[key] for c in per_call])) if per_call else 0.0

    return {
        "env": base,
        "tasks": n_tasks,
        "imagined calls": imagined,
        "invalid results": invalid / max(imagined, 1),
        "exact match": mean("exact"),
        "field accuracy": mean("field_accuracy"),
        "hallucinated fields": mean("hallucinated_fields"),
        "success in rehearsal, real verifier": float(np.mean(real_verifier)) if real_verifier else 0.0,
        "success in rehearsal, consistent verifier": rehearsed,
        "success in real env": real,
        "rehearsal gap": rehearsed - real,
    }
