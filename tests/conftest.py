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


class _Out(dict):
    __getattr__ = dict.__getitem__


class ScriptedModel(torch.nn.Module):
    """Writes `texts[k]` for its k-th generation, whatever the prompt (a stand-in environment role)."""

    def __init__(self, lm, texts: list[str]):
        from types import SimpleNamespace

        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.vocab = len(lm.tokenizer)
        self.scripts = [lm.encode(t) + [lm.end_id] for t in texts]
        self.calls = 0
        self.config = SimpleNamespace(max_position_embeddings=4096)

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=False, **_):
        if cache is None:  # a new generation starts
            script, step = self.scripts[min(self.calls, len(self.scripts) - 1)], 0
            self.calls += 1
        else:
            script, step = cache
        logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab), -1e4)
        logits[:, -1, script[min(step, len(script) - 1)]] = 0.0
        return _Out(logits=logits, cache=(script, step + 1))


@pytest.fixture
def scripted(tiny_lm):
    """scripted(texts) -> an LM (tiny_lm's tokenizer) that writes texts[k] as its k-th generation."""
    from rehearsal_gym.core.model import LM

    return lambda texts: LM(ScriptedModel(tiny_lm, texts), tiny_lm.tokenizer)


def local_tokenizer(corpus, specials, eos, pad=None, template=None):
    """A byte-level BPE trained here (no Hub), as a Hugging Face fast tokenizer: a model nobody
    here wrote gets a tokenizer nobody here designed (no role tokens; a chat template if given)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        list(corpus) * 20,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=list(specials),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    out = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=pad)
    if template is not None:
        out.chat_template = template
    return out
