"""Kill a training process mid-checkpoint (SIGKILL, no cleanup) and resume it.

The child process kills itself during the write of the checkpoint after iteration 2, either while
files are being written or between the two renames that publish the checkpoint. The resumed run
must find the complete checkpoint of iteration 1, no corrupt or temporary file, and finish with
exactly the history of a run that was never interrupted.
"""

import copy
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from rehearsal_gym.agents.ppo import PPOConfig
from rehearsal_gym.agents.train import train

from rehearsal_gym.core.model import LM

CONFIG = dict(iterations=3, tasks_per_iter=2, group_size=2, epochs=1, minibatch_size=4, max_turns=2, lr=1e-3)

CHILD = textwrap.dedent(
    """
    import os, signal, sys, types
    import torch
    torch.set_num_threads(1)
    import rehearsal_gym.agents.ppo as ppo
    import rehearsal_gym.agents.checkpoint as checkpoint
    import rehearsal_gym.core.atomic as atomic
    from rehearsal_gym.agents.train import train
    from rehearsal_gym.core.model import LM

    model_dir, out, point = sys.argv[1:4]
    die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    real_save = ppo.PPOTrainer.save

    def save(self, path):
        if self.iteration == 2:
            if point == "write":  # weights on disk, optimizer state not yet
                checkpoint.torch = type("T", (), {"save": staticmethod(die)})
            else:  # the old checkpoint moved aside, the new one not yet in place
                real_replace = os.replace
                calls = []
                def replace(src, dst):
                    calls.append(src)
                    if len(calls) == 2:
                        die()
                    real_replace(src, dst)
                fake_os = types.ModuleType("os")  # os as atomic sees it, but for replace
                fake_os.__dict__.update(os.__dict__)
                fake_os.replace = replace
                atomic.os = fake_os
        real_save(self, path)

    ppo.PPOTrainer.save = save
    train(ppo.PPOConfig.from_flat(**CONFIG), LM.load(model_dir), out, eval_tasks=2, progress=False)
    """
).replace("CONFIG", repr(CONFIG))


def fresh(tiny_lm):
    return LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The child trains with one thread; so do the runs compared with it here (a float reduction
    split over another number of threads may round differently, and histories compare exactly)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def uninterrupted(tiny_lm, tmp_path_factory, one_thread):
    out = tmp_path_factory.mktemp("uninterrupted")
    result = train(
        PPOConfig.from_flat(**CONFIG), fresh(tiny_lm), out, eval_tasks=2, progress=False, log=lambda *a: None
    )
    return out, result


@pytest.mark.parametrize("point", ["write", "rename"])
def test_sigkill_mid_checkpoint_then_resume(tiny_lm, tmp_path, uninterrupted, point):
    model_dir, out = tmp_path / "model", tmp_path / "run"
    tiny_lm.save(model_dir)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run(
        [sys.executable, str(script), str(model_dir), str(out), point],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert not (out / "result.json").exists()

    result = train(
        PPOConfig.from_flat(**CONFIG),
        fresh(tiny_lm),
        out,
        eval_tasks=2,
        resume=True,
        progress=False,
        log=print,
    )
    ref_out, ref_result = uninterrupted
    assert result["iterations"] == 3 and result["after"] == ref_result["after"]
    state = json.loads((out / "checkpoint" / "trainer_state.json").read_text())
    ref_state = json.loads((ref_out / "checkpoint" / "trainer_state.json").read_text())
    assert state["history"] == ref_state["history"]  # iterations 2 and 3 redone exactly as without the kill
    resumed = LM.load(out / "final_model").model.state_dict()
    for name, tensor in LM.load(ref_out / "final_model").model.state_dict().items():
        torch.testing.assert_close(resumed[name], tensor)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no temporaries left
