"""Rollouts on Ray actors (local cluster): versions, worker death, the trainer's Ray path."""

import copy
import os
import sys
import threading
import time
from dataclasses import asdict

import gymnasium as gym
import pytest
import torch
from rehearsal_gym.agents.distributed import RolloutWorker, StaleWeightsError
from rehearsal_gym.agents.ppo import PPOConfig, PPOTrainer

from rehearsal_gym.core.model import LM

TINY = dict(tasks_per_iter=2, group_size=2, epochs=1, minibatch_size=4, max_turns=2, lr=1e-3)


def fresh(tiny_lm):
    return LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer)


def test_worker_refuses_a_policy_version_it_does_not_hold(tiny_lm):
    worker = RolloutWorker(asdict(PPOConfig.from_flat(**TINY)), fresh(tiny_lm), num_envs=2)
    with pytest.raises(StaleWeightsError, match="version -1"):
        worker.rollout(0, [{"task_index": 0}], seed=0)
    worker.set_weights(3, tiny_lm.model.state_dict())
    version, episodes = worker.rollout(3, [{"task_index": 0}, {"task_index": 1}], seed=0)
    assert version == 3 and [ep.task_id for ep in episodes] == [
        env.unwrapped.task.task_id for env in worker.envs
    ]


def test_the_learner_refuses_a_round_of_mixed_policy_versions(tiny_lm):
    """Without Ray: rollouts that report an episode sampled with another policy version stop the
    round before any update."""

    class MixedRollouts:
        def sync(self, version, weights):
            pass

        def collect(self, options, seed):
            return [None] * len(options), [0] * (len(options) - 1) + [-1]

        def close(self):
            pass

    trainer = PPOTrainer(PPOConfig.from_flat(**TINY), fresh(tiny_lm))
    trainer.rollouts = MixedRollouts()
    before = [p.detach().clone() for p in trainer.lm.model.parameters()]
    with pytest.raises(RuntimeError, match=r"policy versions \[-1, 0\], not 0"):
        trainer.train_iteration()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.lm.model.parameters(), strict=True))


try:
    import ray
except ImportError:  # the Ray tests skip one by one (through the fixture); the ones above still run
    ray = None


@pytest.fixture(scope="module")
def ray_local():
    if ray is None:
        pytest.skip("needs Ray: pip install 'rehearsal-gym[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _pool(tiny_lm, workers=2, **kw):
    from rehearsal_gym.agents.distributed import RayRollouts

    config = PPOConfig.from_flat(**{**TINY, "tasks_per_iter": 4, "rollout_workers": workers, **kw})
    return RayRollouts(config, fresh(tiny_lm))


def test_collect_spreads_a_round_over_workers_with_one_version(ray_local, tiny_lm):
    pool = _pool(tiny_lm)
    pool.sync(5, tiny_lm.model.state_dict())
    options = [{"task_index": i} for i in range(8)]
    episodes, versions = pool.collect(options, seed=0)
    assert versions == [5] * 8
    assert len({ray.get(w.pid.remote()) for w in pool.workers}) == 2  # two processes did the work
    probe = gym.make(pool.config.env, split="train").unwrapped
    assert [ep.task_id for ep in episodes] == [probe.family.task("train", i).task_id for i in range(8)]
    pool.close()


def test_a_dead_worker_is_replaced_and_its_shard_rerun(ray_local, tiny_lm):
    pool = _pool(tiny_lm)
    pool.sync(1, tiny_lm.model.state_dict())
    ray.kill(pool.workers[0], no_restart=True)  # dies before the round
    episodes, versions = pool.collect([{"task_index": i} for i in range(8)], seed=0)
    assert len(episodes) == 8 and all(ep is not None for ep in episodes) and versions == [1] * 8
    assert pool.restarts == 1
    pool.close()


# The sleeper sleeps far longer than the bound the tests allow, so a pass means it was replaced, not
# waited for; the bound leaves room for Ray to start a fresh actor on a loaded 2-core machine.
SLEEP_S = 600.0
REPLACED_WITHIN_S = 300.0


class SleepyWorker(RolloutWorker):
    """The first worker to start a rollout (across all actors) sleeps in it for ten minutes."""

    marker = ""  # set by the tests; pickled by value with the class

    def rollout(self, version, options, seed):
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return super().rollout(version, options, seed)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        time.sleep(SLEEP_S)
        return super().rollout(version, options, seed)


def _sleepy_pool(tiny_lm, tmp_path, **kw):
    from rehearsal_gym.agents.distributed import RayRollouts

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    SleepyWorker.marker = str(tmp_path / "sleeper")
    config = PPOConfig.from_flat(**{**TINY, "tasks_per_iter": 4, "rollout_workers": 2, **kw})
    pool = RayRollouts(config, fresh(tiny_lm), worker_cls=SleepyWorker)
    pool.sync(2, tiny_lm.model.state_dict())
    pids = [ray.get(w.pid.remote()) for w in pool.workers]
    return pool, pids


def test_killing_a_worker_mid_rollout_loses_no_episode(ray_local, tiny_lm, tmp_path):
    pool, pids = _sleepy_pool(tiny_lm, tmp_path)
    marker = tmp_path / "sleeper"

    def kill_the_sleeper():
        deadline = time.monotonic() + REPLACED_WITHIN_S
        while not marker.exists() or not marker.read_text():
            if time.monotonic() > deadline:
                return  # never started sleeping: collect() finishes and the restart count fails the test
            time.sleep(0.05)
        ray.kill(pool.workers[pids.index(int(marker.read_text()))], no_restart=True)

    killer = threading.Thread(target=kill_the_sleeper, daemon=True)
    killer.start()
    try:
        start = time.monotonic()
        episodes, versions = pool.collect([{"task_index": i} for i in range(8)], seed=0)
        killer.join(timeout=REPLACED_WITHIN_S)
        assert not killer.is_alive()
        assert len(episodes) == 8 and all(ep is not None for ep in episodes) and versions == [2] * 8
        assert pool.restarts == 1 and time.monotonic() - start < REPLACED_WITHIN_S  # replaced, not waited for
    finally:
        pool.close()


def test_a_silent_worker_is_replaced_after_the_timeout(ray_local, tiny_lm, tmp_path):
    # healthy shards take < 1 s alone, up to several on a 2-core machine busy with trainings
    pool, _ = _sleepy_pool(tiny_lm, tmp_path, rollout_timeout_s=20.0)
    try:  # close even on failure: the sleeper holds a CPU of the local Ray for 10 minutes
        start = time.monotonic()
        episodes, versions = pool.collect([{"task_index": i} for i in range(8)], seed=0)
        assert all(ep is not None for ep in episodes) and versions == [2] * 8
        # >= 1: on a loaded machine a healthy shard may also outlive the timeout and be replaced
        assert pool.restarts >= 1 and time.monotonic() - start < REPLACED_WITHIN_S
    finally:
        pool.close()


def test_trainer_with_ray_workers_trains_on_its_own_version(ray_local, tiny_lm):
    trainer = PPOTrainer(PPOConfig.from_flat(**{**TINY, "rollout_workers": 2}), fresh(tiny_lm))
    before = [p.detach().clone() for p in trainer.lm.model.parameters()]
    for it in range(2):
        row = trainer.train_iteration()
        assert trainer.last_versions == [it] * 4
    assert 0.0 <= row["charts/success"] <= 1.0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.lm.model.parameters(), strict=True))
    trainer.close()


def test_rehearsed_rollouts_on_ray_workers_train_the_environment_role(ray_local):
    """The shipped default calls tools, so the workers' SelfSim episodes hold imagined calls, and
    each becomes an environment-role sequence on the learner."""
    from rehearsal_gym import default_lm

    config = PPOConfig.from_flat(**{**TINY, "max_turns": 3, "rollout_workers": 2, "rehearse": "replace"})
    trainer = PPOTrainer(config, default_lm())
    try:
        row = trainer.train_iteration()
    finally:
        trainer.close()
    assert row["charts/env_role_sequences"] > 0 and trainer.last_versions == [0] * 4


class DyingWorker(RolloutWorker):
    """Every rollout kills its actor's process."""

    def rollout(self, version, options, seed):
        os._exit(1)


def test_a_round_gives_up_after_three_failures_per_shard(ray_local, tiny_lm):
    from rehearsal_gym.agents.distributed import RayRollouts

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    config = PPOConfig.from_flat(
        **{**TINY, "tasks_per_iter": 2, "rollout_workers": 1}
    )  # one shard: fewer restarts
    pool = RayRollouts(config, fresh(tiny_lm), worker_cls=DyingWorker)
    pool.sync(0, tiny_lm.model.state_dict())
    try:
        with pytest.raises(RuntimeError, match="rollout workers failed 3 times in one round"):
            pool.collect([{"task_index": i} for i in range(4)], seed=0)
        assert pool.restarts == 4  # 3 per shard were allowed; the 4th replacement ends the round
    finally:
        pool.close()
