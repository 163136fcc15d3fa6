"""SelfSimEnv: the policy's world-rehearsal role (EnvACE) as a Gymnasium env.

The env takes its tasks, tools and verifier from a real env (`base`). On a tool call, the
language model, prompted in its *environment role*, writes the tool's JSON result. The result
must parse as a JSON object with the shape of that tool's real results; otherwise the episode
ends with reward 0 and ``info["error"]`` says why.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rehearsal_gym.envs.base import ToolEnv, execute, result_text

from .demos import record_oracle_episodes
from .model import LM
from .protocol import MAX_JSON_DEPTH, ToolCall, format_call, quote
from .roles import ResultBank, env_role_prompt
from .sampling import sample

MODES = ("replace", "wrap", "mixed")


def result_error(text: str, shapes: set[frozenset[str]]) -> tuple[dict[str, Any] | None, str | None]:
    """Parse an imagined result; return (result, None) or (None, why it is unusable).

    A result must be a JSON object whose keys are those of some real result of the tool
    (`shapes`), or ``{"error": <string>}`` as a refusing tool writes. Empty `shapes`: any object.
    """
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        return None, f"environment role wrote invalid JSON ({str(e)[:60]}): {quote(text, 60)}"
    if not isinstance(value, dict):
        return None, f"environment role wrote a JSON {type(value).__name__}, not an object: {quote(text, 60)}"
    keys = frozenset(value)
    if keys == {"error"} and isinstance(value["error"], str):
        return value, None
    if shapes and keys not in shapes:
        want = " or ".join(sorted("{" + ", ".join(sorted(s)) + "}" for s in shapes))
        return None, f"environment role wrote keys {sorted(keys)}; real results have {want}"
    if _depth(value) > MAX_JSON_DEPTH:
        return None, "environment role wrote JSON nested too deep"
    return value, None


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def fidelity(imagined: dict[str, Any], real: dict[str, Any]) -> dict[str, float]:
    """Exact match, share of the real result's fields reproduced, and share of imagined fields
    that the real result does not have (hallucinated)."""
    exact = float(json.dumps(imagined, sort_keys=True) == json.dumps(real, sort_keys=True))
    fields = float(np.mean([k in imagined and imagined[k] == v for k, v in real.items()])) if real else exact
    hallucinated = float(np.mean([k not in real for k in imagined])) if imagined else 0.0
    return {"exact": exact, "field_accuracy": fields, "hallucinated_fields": hallucinated}


class SelfSimEnv(ToolEnv):
    """A real env's tasks with tool results imagined by the model in its environment role.

    ## Observation, action, episode end
    As the base env (`rehearsal_gym.envs.ToolEnv`). In addition, the episode ends (reward 0,
    ``info["error"]``) when the environment role writes an unusable result.

    ## Reward
    The base env's verifier applied to the agent's calls and answer: the calls are replayed on a
    fresh backend at the end, so a rehearsed and a real episode are scored the same way.

    ## Arguments
    base: id of a real env ("ToolCall-v0", "Retail-v0", "Finance-v0").
    model: an `LM`, a local model directory, or None for the embedded default (the cached warm
        start if one exists, else an untrained default model, with a warning).
    mode: "replace" (the backend is never called), "wrap" (the real tool runs too; info carries
        both results and a fidelity score; the agent sees the imagined one), "mixed" (real with
        probability `p_real`, drawn from the env's seeded RNG).
    n_examples: real recorded results of the tool shown in the environment-role prompt.
    n_samples: environment-role samples per call; with more than one, ``info["uncertainty"]``
        is the share of samples that disagree with the one used.
    max_result_tokens, temperature: environment-role sampling.
    Other arguments as the base env.

    ## Info (per call)
    ``imagined`` (bool), ``env_role`` (prompt ids, sampled ids and log-probs of the environment
    role, for training it), in wrap mode ``real_result`` and ``fidelity``.
    """

    def __init__(
        self,
        base: str = "ToolCall-v0",
        model: LM | str | None = None,
        mode: str = "replace",
        p_real: float = 0.5,
        n_examples: int = 2,
        n_samples: int = 1,
        max_result_tokens: int = 256,
        temperature: float = 1.0,
        bank_tasks: int = 40,
        **base_kwargs: Any,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not 0.0 <= p_real <= 1.0:
            raise ValueError(f"p_real must be in [0, 1], got {p_real!r}")
        for name, value in (("n_samples", n_samples), ("max_result_tokens", max_result_tokens)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(n_examples, int) or n_examples < 0:
            raise ValueError(f"n_examples must be an int >= 0, got {n_examples!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        spec = gym.spec(base) if isinstance(base, str) else None
        base_cls = gym.envs.registration.load_env_creator(spec.entry_point) if spec else None
        if not (isinstance(base_cls, type) and issubclass(base_cls, ToolEnv)):
            raise ValueError(f"base must be the id of a real tool env, got {base!r}")
        self.family = base_cls.family
        super().__init__(**base_kwargs)
        self.base_id, self.mode, self.p_real = base, mode, p_real
        self.n_examples, self.n_samples = n_examples, n_samples
        self.max_result_tokens, self.temperature = max_result_tokens, temperature
        self.lm = _resolve_model(model)
        self.bank = ResultBank()
        for demo in record_oracle_episodes(base, range(bank_tasks)):
            for j, call in demo.call_turns:
                self.bank.add(call, demo.transcript[j + 1][1])
        self.metadata = {**ToolEnv.metadata}

    # -- where a tool call is answered ------------------------------------------------------------
    def run_tool(self, call: ToolCall, info: dict[str, Any]) -> dict[str, Any] | None:
        use_real = self.mode == "mixed" and self.np_random.random() < self.p_real
        if use_real:
            real = execute(self.backend, call)
            self.bank.add(call, result_text(real))
            info["imagined"] = False
            return real
        imagined = self.imagine(call, info)
        info["imagined"] = True
        if self.mode == "wrap":
            real = execute(self.backend, call)
            self.bank.add(call, result_text(real))
            info["real_result"] = real
            if imagined is not None:
                info["fidelity"] = fidelity(imagined, real)
        return imagined

    def imagine(self, call: ToolCall, info: dict[str, Any]) -> dict[str, Any] | None:
        """Sample the environment role's result for `call`; None (and info["error"]) if unusable."""
        examples = self.bank.examples(
            call.name, self.n_examples, self.np_random, exclude=format_call(call.name, call.arguments)
        )
        prompt = env_role_prompt(self.tools, call, self.transcript[:-1], examples)
        prompt_ids = self.lm.turn("sim", prompt) + [self.lm.role_ids["env"]]
        if len(prompt_ids) + self.max_result_tokens > self.lm.max_len:
            info["error"] = f"environment-role prompt ({len(prompt_ids)} tokens) overflows the context"
            return None
        generator = torch.Generator().manual_seed(int(self.np_random.integers(0, 2**62)))
        out = sample(
            self.lm.model,
            [prompt_ids] * self.n_samples,
            max_new_tokens=self.max_result_tokens,
            stop_id=self.lm.end_id,
            pad_id=self.lm.pad_id,
            temperature=self.temperature,
            generator=generator,
        )
        texts = [self.lm.decode(t) for t in out.tokens]
        info["env_role"] = {"prompt_ids": prompt_ids, "ids": out.tokens[0], "logprobs": out.logprobs[0]}
        if self.n_samples > 1:
            canon = [_canonical(t) for t in texts]
            info["uncertainty"] = float(np.mean([c != canon[0] for c in canon[1:]]))
        if not out.stopped[0]:
            info["error"] = (
                f"environment role did not finish its result within {self.max_result_tokens} tokens"
            )
            return None
        result, error = result_error(texts[0], self.bank.shapes(call.name))
        if error:
            info["error"] = error
        return result

    def final_state(self) -> Any:
        """Replay the agent's calls on a fresh backend: rehearsed episodes are scored like real ones."""
        return self.family.replay(self.task, self.calls)


def _canonical(text: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True)
    except (json.JSONDecodeError, RecursionError):
        return text


def _resolve_model(model: LM | str | None) -> LM:
    if isinstance(model, LM):
        return model
    if isinstance(model, str):
        return LM.load(model)
    if model is not None:
        raise ValueError(f"model must be an LM, a model directory or None, got {type(model).__name__}")
    from .defaults import default_lm

    lm, trained = default_lm()
    if not trained:
        warnings.warn(
            "SelfSimEnv: no warm-started default model is cached, using an untrained one; "
            "run `rehearsal-gym warmstart` once for a useful environment role",
            stacklevel=3,
        )
    return lm
