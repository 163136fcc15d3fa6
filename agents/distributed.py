"""Rollouts on Ray actors: each worker holds its own envs and a copy of the policy weights.

The learner calls `RayRollouts.sync(version, weights)` after each update and `collect(options,
seed)` to gather one round of episodes. Weights carry a version number (the learner's iteration);
a worker samples a whole shard with one version and returns it with the episodes, so no
trajectory mixes two policies. A worker that dies or stays silent past the timeout is replaced
by a fresh actor with the current weights and its shard is re-run; the round is never lost.

`RolloutWorker` is a plain class (usable without Ray); Ray is imported only by `RayRollouts`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from rehearsal_gym.core.model import LM
from rehearsal_gym.core.rollout import Episode, run_episodes

from .config import PPOConfig
from .train_envs import make_train_envs


class StaleWeightsError(RuntimeError):
    """A rollout was asked for a policy version the worker does not hold."""


class RolloutWorker:
    """Envs of one config and a copy of the policy; samples shards of a round on request."""

    def __init__(self, config: Mapping[str, Any], lm: LM, num_envs: int, threads: int = 1) -> None:
        torch.set_num_threads(threads)  # one core per worker: workers run side by side
        self.config = PPOConfig.from_dict(dict(config))
        self.lm = lm.to("cuda") if self.config.rollout.worker_gpus > 0 else lm
        self.lm.model.eval()
        self.envs = make_train_envs(self.config, lm, num_envs)
        self.version = -1

    def set_weights(self, version: int, weights: Mapping[str, torch.Tensor]) -> int:
        """Load the learner's weights of policy `version` (the env role uses them too)."""
        self.lm.model.load_state_dict(weights)
        self.version = int(version)
        return self.version

    def rollout(
        self, version: int, options: Sequence[Mapping[str, Any]], seed: int
    ) -> tuple[int, list[Episode]]:
        """One sampled episode per reset option, all with policy `version`."""
        if version != self.version:
            raise StaleWeightsError(f"worker holds policy version {self.version}, asked for {version}")
        if len(options) > len(self.envs):  # a bigger shard than planned (a replaced peer's share)
            self.envs += make_train_envs(self.config, self.lm, len(options) - len(self.envs))
        episodes = run_episodes(
            self.lm,
            self.envs[: len(options)],
            options,
            greedy=False,
            temperature=self.config.ppo.temperature,
            generator=torch.Generator().manual_seed(seed),
            seed=seed,
        )
        return self.version, episodes

    def pid(self) -> int:
        return os.getpid()


class RayRollouts:
    """`config.rollout.rollout_workers` Ray actors sharing one round of episodes between them."""

    def __init__(self, config: PPOConfig, lm: LM, worker_cls: type[RolloutWorker] = RolloutWorker) -> None:
        try:
            import ray
        except ImportError as e:  # an optional extra
            raise ImportError(
                "PPOConfig.rollout_workers > 0 needs Ray: pip install 'rehearsal-gym[ray]'"
            ) from e
        self.ray = ray
        if not ray.is_initialized():
            ray.init(
                address=config.rollout.ray_address or None,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        self.config = config
        self.num_workers = config.rollout.rollout_workers
        self.per_worker = -(-config.tasks_per_iter * config.group_size // self.num_workers)
        gpus = config.rollout.worker_gpus
        self._actor = ray.remote(num_cpus=1, num_gpus=gpus, max_restarts=0)(worker_cls)
        # workers get a CPU copy (a CUDA tensor cannot be unpickled where there is no GPU)
        self._lm = ray.put(lm if lm.device.type == "cpu" else lm.with_model(copy.deepcopy(lm.model).cpu()))
        self.version, self._weights = -1, None
        self.restarts = 0  # workers replaced after a death or a timeout
        self.workers = [self._spawn() for _ in range(self.num_workers)]

    def _spawn(self):
        worker = self._actor.remote(asdict(self.config), self._lm, self.per_worker)
        if self._weights is not None:
            worker.set_weights.remote(self.version, self._weights)  # ordered before any rollout call
        return worker

    def _replace(self, i: int) -> None:
        """Kill worker `i` and start a fresh one with the current weights; wait until it is up,
        so that its start-up time does not count against the rollout timeout."""
        self.ray.kill(self.workers[i], no_restart=True)
        self.workers[i] = self._spawn()
        self.restarts += 1
        try:
            self.ray.get(
                self.workers[i].pid.remote(), timeout=max(120.0, self.config.rollout.rollout_timeout_s)
            )
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
            pass  # the round's loop sees the failure and counts it against its budget

    def sync(self, version: int, weights: Mapping[str, torch.Tensor]) -> None:
        """Send the learner's weights of `version` to every worker (once per version)."""
        if version == self.version:
            return
        self.version = int(version)
        self._weights = self.ray.put({k: v.detach().cpu().clone() for k, v in weights.items()})
        for worker in self.workers:  # Ray runs one caller's calls to an actor in order
            worker.set_weights.remote(self.version, self._weights)

    def collect(self, options: Sequence[Mapping[str, Any]], seed: int) -> tuple[list[Episode], list[int]]:
        """Episodes for `options` (in order) and the policy version each was sampled with."""
        ray = self.ray
        shards = [list(s) for s in np.array_split(np.arange(len(options)), self.num_workers) if len(s)]

        def submit(i: int):
            idx = shards[i]
            return self.workers[i].rollout.remote(self.version, [options[j] for j in idx], seed + int(idx[0]))

        pending = {submit(i): i for i in range(len(shards))}
        results: dict[int, tuple[int, list[Episode]]] = {}
        budget = self.restarts + 3 * len(shards)  # replacements allowed this round before giving up
        while pending:
            if self.restarts > budget:
                raise RuntimeError(
                    f"rollout workers failed {3 * len(shards)} times in one round; "
                    "check the Ray cluster or raise PPOConfig.rollout_timeout_s"
                )
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=self.config.rollout.rollout_timeout_s)
            if not ready:  # silent past the timeout: replace every pending worker, re-run its shard
                for ref, i in list(pending.items()):
                    del pending[ref]
                    self._replace(i)
                    pending[submit(i)] = i
                continue
            ref = ready[0]
            i = pending.pop(ref)
            try:
                results[i] = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError):
                self._replace(i)  # died mid-rollout: a fresh actor with the current weights re-runs it
                pending[submit(i)] = i
        episodes: list[Episode] = [None] * len(options)  # type: ignore[list-item]
        versions = [-1] * len(options)
        for i, (version, eps) in results.items():
            for j, ep in zip(shards[i], eps, strict=True):
                episodes[j], versions[j] = ep, version
        return episodes, versions

    def close(self) -> None:
        for worker in self.workers:
            self.ray.kill(worker, no_restart=True)
        self.workers = []
