import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from rehearsal_gym.core.model import LM, LMConfig
from rehearsal_gym.core.sampling import sample, score
from rehearsal_gym.core.tokenizer import ROLE_TOKENS, SPECIAL_TOKENS


def _prompts(lm):
    return [
        lm.turn("task", "What is 15% of 260?") + [lm.role_ids["agent"]],
        lm.turn("task", "Cancel order O1234")
        + lm.turn("env", '{"status": "pending"}')
        + [lm.role_ids["agent"]],
        [lm.role_ids["agent"]],
    ]


def test_role_token_strings_in_text_stay_text(tiny_lm):
    ids = tiny_lm.encode("hi " + " ".join(SPECIAL_TOKENS))
    assert not set(ids) & {tiny_lm.pad_id, tiny_lm.end_id, *tiny_lm.role_ids.values()}
    assert tiny_lm.decode(ids) == "hi " + " ".join(SPECIAL_TOKENS)
    turn = tiny_lm.turn("agent", "CALL add {}")
    assert turn[0] == tiny_lm.role_ids["agent"] and turn[-1] == tiny_lm.end_id


def test_any_text_is_encodable(tiny_lm):
    text = "\x00\U0001f600\u202e caf\u00e9 12345"
    assert tiny_lm.decode(tiny_lm.encode(text)) == text


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_logprobs_match_scorer(tiny_lm, temperature):
    gen = torch.Generator().manual_seed(0)
    prompts = _prompts(tiny_lm)
    out = sample(
        tiny_lm.model,
        prompts,
        max_new_tokens=24,
        stop_id=tiny_lm.end_id,
        pad_id=tiny_lm.pad_id,
        temperature=temperature,
        generator=gen,
    )
    with torch.no_grad():
        scored = score(tiny_lm.model, prompts, out.tokens, pad_id=tiny_lm.pad_id, temperature=temperature)
    for lp, sc, toks in zip(out.logprobs, scored, out.tokens, strict=True):
        assert len(lp) == len(toks) == len(sc) > 0
        torch.testing.assert_close(torch.tensor(lp), sc, atol=2e-4, rtol=0)


def test_batched_sampling_equals_one_by_one(tiny_lm):
    prompts = _prompts(tiny_lm)
    kw = dict(max_new_tokens=16, stop_id=tiny_lm.end_id, pad_id=tiny_lm.pad_id, greedy=True)
    batched = sample(tiny_lm.model, prompts, **kw)
    for i, p in enumerate(prompts):
        single = sample(tiny_lm.model, [p], **kw)
        assert single.tokens[0] == batched.tokens[i]
        torch.testing.assert_close(
            torch.tensor(single.logprobs[0]), torch.tensor(batched.logprobs[i]), atol=1e-4, rtol=0
        )


def test_sampling_is_reproducible_under_generator_seed(tiny_lm):
    kw = dict(max_new_tokens=16, stop_id=tiny_lm.end_id, pad_id=tiny_lm.pad_id)
    a = sample(tiny_lm.model, _prompts(tiny_lm), generator=torch.Generator().manual_seed(3), **kw)
    b = sample(tiny_lm.model, _prompts(tiny_lm), generator=torch.Generator().manual_seed(3), **kw)
    assert a.tokens == b.tokens


def test_sampler_stops_at_end_token(tiny_lm):
    # Make the end token overwhelmingly likely: every sample is exactly [end].
    model = tiny_lm.model
    with torch.no_grad():
        bias = torch.zeros(model.config.vocab_size)
        bias[tiny_lm.end_id] = 100.0
        handle = model.lm_head.register_forward_hook(lambda m, i, o: o + bias)
        try:
            out = sample(
                model, _prompts(tiny_lm), max_new_tokens=8, stop_id=tiny_lm.end_id, pad_id=tiny_lm.pad_id
            )
        finally:
            handle.remove()
    assert out.tokens == [[tiny_lm.end_id]] * 3 and all(out.stopped)


def test_bad_sampler_arguments(tiny_lm):
    with pytest.raises(ValueError, match="temperature"):
        sample(tiny_lm.model, [[1]], max_new_tokens=1, stop_id=None, pad_id=0, temperature=0)
    with pytest.raises(ValueError, match="at least one token"):
        sample(tiny_lm.model, [[]], max_new_tokens=1, stop_id=None, pad_id=0)


def test_save_load_round_trip(tiny_lm, tmp_path):
    tiny_lm.save(tmp_path / "m")
    assert (tmp_path / "m" / "model.safetensors").is_file()
    loaded = LM.load(tmp_path / "m")
    ids = torch.tensor([_prompts(tiny_lm)[1]])
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(input_ids=ids).logits, tiny_lm.model(input_ids=ids).logits)
    assert loaded.role_ids == tiny_lm.role_ids
    tiny_lm.save(tmp_path / "m")  # overwriting keeps a complete directory
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_load_foreign_hf_model_adds_role_tokens(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(
        ["some other model text"] * 5, trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"])
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=64))
    model.save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    lm = LM.load(tmp_path / "hf")
    assert set(lm.role_ids) == set(ROLE_TOKENS) and lm.max_len == 64
    assert lm.model.get_input_embeddings().weight.shape[0] == len(lm.tokenizer)
    out = sample(
        lm.model,
        [lm.turn("task", "some text") + [lm.role_ids["agent"]]],
        max_new_tokens=4,
        stop_id=lm.end_id,
        pad_id=lm.pad_id,
        greedy=True,
    )
    assert len(out.tokens[0]) >= 1


def test_load_rejects_non_model_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        LM.load(tmp_path)


def test_lm_config_validation():
    with pytest.raises(ValueError, match="num_layers"):
        LMConfig(num_layers=0)
    with pytest.raises(ValueError, match="divisible"):
        LMConfig(hidden_size=30, num_heads=4)


def test_build_tokenizer_is_cached(tmp_path, monkeypatch):
    from rehearsal_gym.training.warmstart import build_tokenizer

    monkeypatch.setenv("REHEARSAL_GYM_HOME", str(tmp_path))
    first = build_tokenizer(vocab_size=500, tasks_per_env=10)
    assert any(p.name.startswith("tokenizer-v") for p in tmp_path.iterdir())
    second = build_tokenizer(vocab_size=500, tasks_per_env=10)
    assert first.get_vocab() == second.get_vocab()
