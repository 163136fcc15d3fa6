import atexit
import os
import shutil
import tempfile

import pytest
import torch

# Keep caches of the default tokenizer/model out of the user's home during tests, and SB3's logger
# folders (learn() otherwise leaves a /tmp/SB3-<time> folder per call) in the same temp dir, removed
# at exit.
_TMP = tempfile.mkdtemp(prefix="rehearsal-gym-test-")
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)
os.environ.setdefault("REHEARSAL_GYM_HOME", _TMP)
os.environ.setdefault("SB3_LOGDIR", os.path.join(_TMP, "sb3"))
torch.set_num_threads(min(2, torch.get_num_threads()))

from rehearsal_gym.envs import REAL_ENV_IDS  # noqa: E402

import rehearsal_gym  # noqa: E402,F401 - registers env ids


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from rehearsal_gym.core.tokenizer import train_tokenizer
    from rehearsal_gym.rehearsal.demos import corpus_texts, record_oracle_episodes

    demos = [d for env_id in REAL_ENV_IDS for d in record_oracle_episodes(env_id, range(30))]
    return train_tokenizer(corpus_texts(demos), vocab_size=600)


@pytest.fixture(scope="session")
def tiny_lm(tiny_tokenizer):
    from rehearsal_gym.core.model import LM, LMConfig

    return LM.new(
        tiny_tokenizer, LMConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), seed=0
    )


class _ShiftedOracle(torch.nn.Module):
    """A stand-in 'model' whose greedy next token is the input's own next token (shift 1) or the
    current one (shift 0): a perfect and a useless copier for probes that read only `.logits`."""

    def __init__(self, vocab: int, shift: int) -> None:
        super().__init__()
        self.vocab, self.shift = vocab, shift

    def forward(self, input_ids):
        target = torch.roll(input_ids, -self.shift, dims=1)
        return type("Out", (), {"logits": torch.nn.functional.one_hot(target, self.vocab).float()})


@pytest.fixture
def shifted_oracle(tiny_lm):
    """shifted_oracle(shift) -> the stand-in model over tiny_lm's vocabulary."""
    return lambda shift: _ShiftedOracle(len(tiny_lm.tokenizer), shift)
