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

import rehearsal_gym  # noqa: E402,F401 - registers env ids

REAL_ENV_IDS = ["ToolCall-v0", "Retail-v0", "Finance-v0"]


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from rehearsal_gym.demos import corpus_texts, record_oracle_episodes
    from rehearsal_gym.tokenizer import train_tokenizer

    demos = [d for env_id in REAL_ENV_IDS for d in record_oracle_episodes(env_id, range(30))]
    return train_tokenizer(corpus_texts(demos), vocab_size=600)


@pytest.fixture(scope="session")
def tiny_lm(tiny_tokenizer):
    from rehearsal_gym.model import LM, LMConfig

    return LM.new(
        tiny_tokenizer, LMConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), seed=0
    )
