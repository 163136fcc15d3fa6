import os
import tempfile

import pytest
import torch

# Keep caches of the default tokenizer/model out of the user's home during tests.
os.environ.setdefault("REHEARSAL_GYM_HOME", tempfile.mkdtemp(prefix="rehearsal-gym-test-"))
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
