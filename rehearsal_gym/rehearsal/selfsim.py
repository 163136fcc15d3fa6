"""SelfSimEnv: the policy's world-rehearsal role (EnvACE) as a Gymnasium env.

The env takes its tasks, tools and verifier from a real tool env (`base`: one of the built-in
families, or any env made by `make_tool_env`). On a tool call, the
language model, prompted in its *environment role*, writes the tool's JSON result. The result
must parse as a JSON object with the shape of that tool's real results; otherwise the episode
ends with reward 0 and ``info["error"]`` says why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rehearsal_gym.core.model import LM
from rehearsal_gym.core.protocol import ToolCall, format_call, parse_turn
from rehearsal_gym.core.rollout import ImaginedCall
from rehearsal_gym.core.sampling import Samples, sample
from rehearsal_gym.defaults import resolve_lm
from rehearsal_gym.envs.base import Backend, Record, ToolEnv, execute, result_text, to_observation
from rehearsal_gym.rehearsal.consistency import consistent_answer, premise_breaks, replan
from rehearsal_gym.rehearsal.demos import seed_bank
from rehearsal_gym.rehearsal.imagined import ImaginationCache, canonical, fidelity, json_object, result_error
from rehearsal_gym.rehearsal.roles import ResultBank, env_role_prompt

# A forked child (gymnasium's AsyncVectorEnv forks its workers on Linux) cannot use the parent's
# OpenMP thread pool: its first parallel forward pass deadlocks. As torch's DataLoader workers do,
# a forked child runs the model on one thread.
os.register_at_fork(after_in_child=lambda: torch.set_num_threads(1))

MODES = ("replace", "wrap", "mixed")
VERIFIERS = ("real", "consistent")
_SETTINGS = ("split", "max_turns", "malformed", "penalty", "render_mode", "hints", "call_format")


def base_env(base: str | gym.Env | Callable[[], gym.Env], **kwargs: Any) -> ToolEnv:
    """The tool env a SelfSimEnv takes its family and settings from: `base` is a registered id
    (made with `kwargs`), a tool env, or a factory of one (called with no arguments)."""
    if isinstance(base, str):
        if ":" not in base and base not in gym.registry:  # gym.make imports the module of "module:Id"
            raise ValueError(f"base {base!r} is not a registered env id")
        env = gym.make(base, disable_env_checker=True, **kwargs).unwrapped
    elif isinstance(base, gym.Env):
        env = base.unwrapped
    elif callable(base):
        env = base()
        env = env.unwrapped if isinstance(env, gym.Env) else env
    else:
        env = None
    if not isinstance(env, ToolEnv):
        raise ValueError(
            "base must be a tool env: a registered id, an env made by make_tool_env or a built-in one, "
            f"or a factory of one; got {base!r}"
        )
    if isinstance(env, SelfSimEnv):
        raise ValueError("base must be a real tool env, not a SelfSimEnv")
    return env


class SelfSimEnv(ToolEnv):
    """A real env's tasks with tool results imagined by the model in its environment role.

    ## Observation, action, episode end
    As the base env (`rehearsal_gym.envs.ToolEnv`). In addition, the episode ends (reward 0,
    ``info["error"]``) when the environment role writes an unusable result.

    ## Reward
    verifier="real" (default): the base env's verifier applied to the agent's calls and answer;
    the calls are replayed on a fresh backend at the end, so a rehearsed and a real episode are
    scored the same way. verifier="consistent": the same verifier, but the expected answer and
    state are the oracle's re-planned in the world the agent saw (a price the agent was shown is
    the price it must report; see `rehearsal_gym.rehearsal.consistency`), so an imagined value the real
    world does not share does not fail an agent that acted correctly on it.

    ## Arguments
    base: the real tool env: a registered id ("ToolCall-v0", "Retail-v0", "Finance-v0", or a user
        env's), an env instance (e.g. made by `make_tool_env`) or a factory of one. Its family and
        settings (split, max_turns, ...) are taken, overridden by the keyword arguments given here.
    model: an `LM`, a local model directory or Hugging Face Hub id, or None for the embedded default
        (shipped trained; see `rehearsal_gym.defaults`). device ("auto", "cpu", "cuda[:N]") and
        dtype ("float32", "bfloat16", "float16"): where and in what the model runs (an `LM` passed
        in is moved in place).
    mode: "replace" (the backend is never called), "wrap" (the real tool runs too; info carries
        both results and a fidelity score; the agent sees the imagined one), "mixed" (real with
        probability `p_real`, drawn from the env's seeded RNG).
    n_examples: real recorded results of the tool shown in the environment-role prompt.
    bank_tasks, bank: the real results come from a given `ResultBank` (shared between envs) or a
        JSON-lines file of one (`ResultBank.save`), else from oracle runs of `bank_tasks` train
        tasks when the family has an oracle, else from nothing: the environment role then works
        from the tool's schema alone until real results arrive. Real results seen in wrap/mixed mode
        join the bank.
    cache: an `ImaginationCache` recording imagined results; one loaded from a file replays them
        (same prompt and seed) without sampling. Imagined results never enter the bank.
    n_samples: environment-role samples per call; with more than one, ``info["uncertainty"]``
        is the share of samples that disagree with the one used.
    max_result_tokens, temperature: environment-role sampling.
    verifier: "real" or "consistent" (see Reward; the consistent verifier re-plans the oracle, so
        it needs a family that can: the built-in ones).
    premise_redraws: how many more environment-role results to draw (each with its own seed, in
        order) when an imagined result drops a record the request names that the task's real world
        holds, or lists it twice, such as the holding of the symbol the user asks to sell
        (`consistency.premise_breaks` against the oracle's real result of the same call); the first
        result that keeps them, else the last drawn, is used; 0 (default): every first draw stands.
        Such a world contradicts the task, and no verifier can say what the agent should have done
        in it.
    Other arguments as the base env.

    ## Info (per call)
    ``imagined`` (bool), ``real_examples`` (how many real results of the tool the environment role
    was shown; 0: it worked from the schema alone), ``env_role`` (an `ImaginedCall`: prompt ids, sampled ids and log-probs
    of the environment role, and in wrap mode the real result, for training it), in wrap mode ``real_result`` and ``fidelity``; with premise_redraws,
    ``premise_redraws`` (results drawn again for this call) and ``premise_kept`` (bool).
    """

    def __init__(
        self,
        base: str | gym.Env | Callable[[], gym.Env] = "ToolCall-v0",
        model: LM | str | None = None,
        mode: str = "replace",
        p_real: float = 0.5,
        n_examples: int = 2,
        n_samples: int = 1,
        max_result_tokens: int = 256,
        temperature: float = 1.0,
        bank_tasks: int = 40,
        bank: ResultBank | str | os.PathLike | None = None,
        cache: ImaginationCache | None = None,
        verifier: str = "real",
        premise_redraws: int = 0,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        **base_kwargs: Any,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if verifier not in VERIFIERS:
            raise ValueError(f"verifier must be one of {VERIFIERS}, got {verifier!r}")
        if not 0.0 <= p_real <= 1.0:
            raise ValueError(f"p_real must be in [0, 1], got {p_real!r}")
        for name, value in (("n_samples", n_samples), ("max_result_tokens", max_result_tokens)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(premise_redraws, int) or isinstance(premise_redraws, bool) or premise_redraws < 0:
            raise ValueError(f"premise_redraws must be an int >= 0, got {premise_redraws!r}")
        if not isinstance(n_examples, int) or n_examples < 0:
            raise ValueError(f"n_examples must be an int >= 0, got {n_examples!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if not isinstance(bank_tasks, int) or bank_tasks < 0:
            raise ValueError(f"bank_tasks must be an int >= 0, got {bank_tasks!r}")
        proto = base_env(base, **base_kwargs) if isinstance(base, str) else base_env(base)
        family = proto.family
        if verifier == "consistent" and not family.can_replan:
            raise ValueError(
                f"verifier='consistent' re-plans the oracle in the rehearsed world, which {family.name} "
                "cannot do; use verifier='real'"
            )
        if premise_redraws and not family.has_oracle:
            raise ValueError(
                f"premise_redraws compares with the oracle's results; {family.name} has no oracle"
            )
        settings = {k: getattr(proto, k) for k in _SETTINGS} | base_kwargs
        self.eager_backend = mode != "replace"  # replace mode never calls the real tools in an episode
        super().__init__(family=family, **settings)
        self.base_id = base if isinstance(base, str) else family.name
        self.mode, self.p_real, self.verifier = mode, p_real, verifier
        # the agent's calls and the results it was shown (what the consistent verifier re-plans on)
        self.seen: list[tuple[ToolCall, dict[str, Any]]] = []
        self.n_examples, self.n_samples, self.premise_redraws = n_examples, n_samples, premise_redraws
        self.max_result_tokens, self.temperature = max_result_tokens, temperature
        self.lm = resolve_lm(model, device=device, dtype=dtype)
        if bank is None:
            bank = seed_bank(family, bank_tasks)
        elif not isinstance(bank, ResultBank):
            bank = ResultBank.load(bank)
        self.bank = bank
        self.cache = cache
        self._pending: dict[str, Any] = {}
        self._real_verdict: bool | None = None
        self._world_seed: int | None = None  # options["world_seed"] of the last reset
        self._oracle_trace: list[tuple[ToolCall, dict[str, Any]]] | None = None  # of the current task

    # -- where a tool call is answered ------------------------------------------------------------
    def run_tool(self, call: ToolCall, info: dict[str, Any]) -> dict[str, Any] | None:
        pending, self._pending = self._pending, {}
        plan = pending["plan"] if pending.get("call") == call else self.plan(call)
        if not plan["imagine"]:
            real = execute(self.backend, call)
            self.bank.add(call, result_text(real))
            info["imagined"] = False
            self.seen.append((call, real))
            return real
        imagined = self.imagine(call, plan, info)
        if imagined is not None:
            self.seen.append((call, imagined))
        info["imagined"] = True
        if self.mode == "wrap":
            real = execute(self.backend, call)
            self.bank.add(call, result_text(real))
            info["real_result"] = Record(real)
            if isinstance(role := info.get(ImaginedCall.INFO_KEY), ImaginedCall):
                info[ImaginedCall.INFO_KEY] = dataclasses.replace(role, real_result=info["real_result"])
            if imagined is not None:
                info["fidelity"] = fidelity(imagined, real)
        return imagined

    def plan(self, call: ToolCall) -> dict[str, Any]:
        """Every random draw of answering `call`, in a fixed order: real or imagined, the
        environment-role prompt (with its drawn examples) and the sampling seed.

        The draws come from the env's `np_random`, or, after a reset with ``options["world_seed"]``,
        from a generator seeded by that seed, the transcript so far and the call: episodes reset
        with the same world seed then get the same answer to the same call after the same history,
        as a deterministic real tool would give them."""
        transcript = self.transcript[:-1] if self.transcript[-1][0] == "agent" else self.transcript
        rng = self.np_random
        if self._world_seed is not None:
            text = json.dumps([transcript, call.name, call.arguments], sort_keys=True, default=str)
            digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
            rng = np.random.default_rng([self._world_seed, int.from_bytes(digest, "little")])
        if self.mode == "mixed" and rng.random() < self.p_real:
            return {"imagine": False}
        examples = self.bank.examples(
            call.name, self.n_examples, rng, exclude=format_call(call.name, call.arguments)
        )
        prompt = env_role_prompt(self.tools, call, transcript, examples)
        prompt_ids = self.lm.start + self.lm.turn("sim", prompt) + self.lm.prompt("env")
        seed = int(rng.integers(0, 2**62))
        return {"imagine": True, "prompt_ids": prompt_ids, "seed": seed, "examples": len(examples)}

    def plan_step(self, action: str) -> dict[str, Any] | None:
        """For a vector env: the plan of the imagination that `step(action)` will need, or None.

        The plan is kept and used by the next `step`, so its draws are made exactly once.
        """
        if self._done or self.task is None:
            return None
        call = parse_turn(action, self.tools, self.call_format)
        if not isinstance(call, ToolCall):
            return None
        plan = self.plan(call)
        self._pending = {"call": call, "plan": plan}
        return plan if plan["imagine"] and self._fits(plan) else None

    def _fits(self, plan: dict[str, Any]) -> bool:
        return len(plan["prompt_ids"]) + self.max_result_tokens <= self.lm.max_len

    def sample_role(self, plans: Sequence[tuple[Sequence[int], int, int]]) -> list[Samples]:
        """Environment-role results of (prompt ids, seed, count) plans, all in one batched call:
        `count` results per prompt, drawn from a generator seeded with the plan's seed. A plan's
        results do not depend on the other plans in the batch (`sample`'s per-row generators)."""
        prompts, generators = [], []
        for prompt, seed, count in plans:
            generator = torch.Generator().manual_seed(seed)
            prompts += [list(prompt)] * count
            generators += [generator] * count
        out = sample(
            self.lm.model,
            prompts,
            max_new_tokens=self.max_result_tokens,
            stop_id=self.lm.end_id,
            pad_id=self.lm.pad_id,
            temperature=self.temperature,
            generator=generators,
        )
        results, row = [], 0
        for _, _, count in plans:
            rows = slice(row, row + count)
            results.append(Samples(out.tokens[rows], out.logprobs[rows], out.stopped[rows]))
            row += count
        return results

    @staticmethod
    def prepare_steps(envs: Sequence[SelfSimEnv], actions: Sequence[str]) -> int:
        """Before `envs[i].step(actions[i])` for each i: sample every environment-role result those
        steps will imagine in one batched call per world model (the steps then use them), as the
        agent's turns are batched. Each result equals the one its step would draw alone. Returns
        how many plans were sampled."""
        groups: dict[tuple, list[tuple[SelfSimEnv, dict[str, Any]]]] = {}
        for env, action in zip(envs, actions, strict=True):
            plan = env.plan_step(action)
            if plan is None or (
                env.cache is not None
                and env.cache.get(ImaginationCache.key(plan["prompt_ids"], plan["seed"])) is not None
            ):
                continue
            key = (id(env.lm.model), env.max_result_tokens, env.temperature, env.lm.end_id, env.lm.pad_id)
            groups.setdefault(key, []).append((env, plan))
        for members in groups.values():
            plans = [(plan["prompt_ids"], plan["seed"], env.n_samples) for env, plan in members]
            for (_, plan), samples in zip(members, members[0][0].sample_role(plans), strict=True):
                plan["samples"] = samples
        return sum(map(len, groups.values()))

    def imagine(self, call: ToolCall, plan: dict[str, Any], info: dict[str, Any]) -> dict[str, Any] | None:
        """The environment role's result for `call`; None (and info["error"]) if unusable."""
        prompt_ids = plan["prompt_ids"]
        info["real_examples"] = plan["examples"]
        if not self._fits(plan):
            info["error"] = f"environment-role prompt ({len(prompt_ids)} tokens) overflows the context"
            return None
        out = self._draw(prompt_ids, plan["seed"], plan.get("samples"))
        result, error = self._read(call, out)
        redraws = 0
        while redraws < self.premise_redraws and error is None and self.breaks_premise(call, result):
            redraws += 1
            out = self._draw(prompt_ids, _redraw_seed(plan["seed"], redraws))
            result, error = self._read(call, out)
        if self.premise_redraws:
            info["premise_redraws"] = redraws
            info["premise_kept"] = error is None and not self.breaks_premise(call, result)
        info[ImaginedCall.INFO_KEY] = ImaginedCall(
            tuple(prompt_ids), tuple(out.tokens[0]), tuple(out.logprobs[0])
        )
        if len(out.tokens) > 1:
            canon = [canonical(self.lm.decode(t)) for t in out.tokens]
            info["uncertainty"] = float(np.mean([c != canon[0] for c in canon[1:]]))
        if error:
            info["error"] = error
            return None
        return result

    def _draw(self, prompt_ids: list[int], seed: int, samples: Samples | None = None) -> Samples:
        """`n_samples` environment-role results for a prompt: given, cached, or sampled with `seed`."""
        key = ImaginationCache.key(prompt_ids, seed)
        out = self.cache.get(key) if self.cache is not None else None
        if out is None:
            out = samples or self.sample_role([(prompt_ids, seed, self.n_samples)])[0]
            if self.cache is not None:
                self.cache.put(key, out)
        return out

    def _read(self, call: ToolCall, out: Samples) -> tuple[dict[str, Any] | None, str | None]:
        """The first sample as a result, or the reason it is unusable."""
        if not out.stopped[0]:
            return None, f"environment role did not finish its result within {self.max_result_tokens} tokens"
        return result_error(self.lm.decode(out.tokens[0]), self.bank.shapes(call.name))

    def breaks_premise(self, call: ToolCall, result: dict[str, Any]) -> bool:
        """Whether `result`, shown for `call`, drops a record the request names that the oracle's
        real result of the same call holds, or lists it twice (see `premise_redraws`)."""
        if self.task is None:
            return False
        if self._oracle_trace is None:
            self._oracle_trace = self.family.oracle_trace(self.task)
        real = next((r for made, r in self._oracle_trace if made == call), None)
        return real is not None and bool(premise_breaks(real, result, self.task.prompt))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """As the base env; ``options["history"]`` = [(action, observation), ...] of a real episode
        of the same task (with ``options["task"]``) starts the rehearsal from that real state
        (branched rehearsal): the prefix is taken as given, later steps are imagined.
        ``options["world_seed"]`` (int >= 0) fixes the imagined world: episodes reset with the same
        world seed are answered alike for the same call after the same history (see `plan`), so a
        group baseline compares samples that met the same world."""
        options = dict(options or {})
        world_seed = options.pop("world_seed", None)
        if world_seed is not None and (  # checked before anything of the current episode is reset
            isinstance(world_seed, bool) or not isinstance(world_seed, int | np.integer) or world_seed < 0
        ):
            raise ValueError(f"options['world_seed'] must be an int >= 0, got {world_seed!r}")
        self._pending = {}
        self.seen = []
        self._oracle_trace = None
        history = options.pop("history", None)
        self._world_seed = None if world_seed is None else int(world_seed)
        obs, info = super().reset(seed=seed, options=options)
        if history:
            if not isinstance(history, list | tuple) or not all(
                isinstance(h, list | tuple) and len(h) == 2 and all(isinstance(x, str) for x in h)
                for h in history
            ):
                raise ValueError("options['history'] must be a list of (action, observation) string pairs")
            if len(history) >= self.max_turns:
                raise ValueError(
                    f"options['history'] has {len(history)} turns; max_turns is {self.max_turns}"
                )
            for action, observation in history:
                self.turn += 1
                self.transcript += [("agent", to_observation(action)), ("env", to_observation(observation))]
                call = parse_turn(action, self.tools, self.call_format)
                if isinstance(call, ToolCall):
                    self.calls.append(call)
                    self.seen.append((call, json_object(observation)))
                    if self.mode != "replace":
                        execute(self.backend, call)
            obs = self.transcript[-1][1]
            info["turn"] = self.turn
        return obs, info

    def final_backend(self) -> Backend:
        """Replay the agent's calls on a fresh backend: rehearsed episodes are scored like real ones."""
        return self.family.replay_backend(self.task, self.calls)

    def step(self, action: str):
        self._real_verdict = None
        obs, reward, terminated, truncated, info = super().step(action)
        if self._real_verdict is not None:
            info["real_verifier_success"] = self._real_verdict
        return obs, reward, terminated, truncated, info

    def verify(self, answer: str) -> float:
        """The real verifier, or (verifier="consistent") its expectation re-planned in the world
        the agent saw; ``info["expected_answer"]`` then reports the re-planned answer and
        ``info["real_verifier_success"]`` what the real verifier says.

        The re-planning has two parts: the facts the oracle decides on (a Retail order's status)
        are taken from the results the agent was shown (`Family.shown_task`), so the oracle takes
        the decision the shown world calls for; values the oracle copies from a result follow the
        shown results (`consistency.replan`)."""
        if self.verifier != "consistent":
            return super().verify(answer)
        self._real_verdict = self.family.success(super().verify(answer))
        task = self.family.shown_task(self.task, self.seen)
        calls, expected = self.family.oracle_plan(task)
        plan = replan(self.family.oracle_trace(task), self.seen, self.task.prompt)
        if plan is not None:
            calls, mapping = plan
            key, expected = consistent_answer(task.answer_kind, task.answer_key, expected, mapping)
            task = dataclasses.replace(task, answer_key=key)
        elif task is self.task:
            return float(self._real_verdict)
        self._expected_answer = expected
        goal = self.family.replay(task, calls)
        state = self.family.replay(task, self.calls)
        return float(
            self.family.state_matches(state, goal) and self.family.check_answer(task, answer, expected)
        )


def _redraw_seed(seed: int, redraw: int) -> int:
    """The sampling seed of the `redraw`-th result drawn again for a call planned with `seed`."""
    digest = hashlib.blake2b(f"{seed}:{redraw}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**62


class SelfSimVectorEnv(gym.vector.SyncVectorEnv):
    """`num_envs` SelfSimEnvs sharing one model, with environment-role generation batched.

    Each step first collects the imagination every sub-env needs (`SelfSimEnv.plan_step`), samples
    them all in one batched call, then steps the sub-envs, which use those samples. Autoreset and
    the returned arrays are those of `gymnasium.vector.SyncVectorEnv` (next-step autoreset).
    Made by ``gym.make_vec("SelfSim-v0", num_envs=N, base=..., mode=...)``.
    """

    def __init__(self, num_envs: int = 1, model: LM | str | None = None, **kwargs: Any) -> None:
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        lm = resolve_lm(model)
        if kwargs.get("bank") is None:  # one bank of real results shared by the sub-envs
            base, bank_tasks = kwargs.get("base", "ToolCall-v0"), kwargs.pop("bank_tasks", 40)
            kwargs["bank"] = seed_bank(base_env(base).family, bank_tasks)
        super().__init__([lambda: SelfSimEnv(model=lm, **kwargs) for _ in range(num_envs)])

    def step(self, actions):
        stepping = [i for i in range(self.num_envs) if not self._autoreset_envs[i]]
        SelfSimEnv.prepare_steps([self.envs[i].unwrapped for i in stepping], [actions[i] for i in stepping])
        return super().step(actions)
