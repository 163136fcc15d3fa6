"""A byte-level BPE tokenizer trained with `tokenizers` on the environments' own text.

Spaces are tokens of their own, so a word or id is the same token sequence wherever it appears
(after a space, a quote or a colon): copying an order id from the request into a call is then a
plain token-for-token copy, which a tiny model learns far sooner. Digits are split one per token
by default. Any byte string is encodable, so hostile agent text never fails to tokenize.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, END = "<|pad|>", "<|end|>"
ROLE_TOKENS = {
    "task": "<|task|>",  # the request and tool list (first observation)
    "agent": "<|agent|>",  # the policy acting: a tool call or an answer
    "env": "<|env|>",  # a tool result (real, or imagined by the environment role)
    "skill": "<|skill|>",  # a skill hint inserted into the observation
    "sim": "<|sim|>",  # the environment-role prompt (EnvACE world rehearsal)
}
SPECIAL_TOKENS = [PAD, END, *ROLE_TOKENS.values()]


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 2048, single_digits: bool = True
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE with the role special tokens; returns a HF fast tokenizer."""
    if vocab_size < 300:
        raise ValueError(f"vocab_size must be >= 300 (256 bytes + specials + merges), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    steps = [pre_tokenizers.Split(" ", "isolated")]
    steps += [pre_tokenizers.Digits(individual_digits=True)] if single_digits else []
    tok.pre_tokenizer = pre_tokenizers.Sequence([*steps, pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=END, extra_special_tokens=list(ROLE_TOKENS.values())
    )


def missing_special_tokens(tokenizer) -> list[str]:
    """Role tokens a (foreign) tokenizer lacks; `add_special_tokens` them and resize the model."""
    vocab = tokenizer.get_vocab()
    return [t for t in SPECIAL_TOKENS if t not in vocab]


class TextIds:
    """Untrusted text <-> token ids, shared by both conversation codecs."""

    kind = ""
    start: list[int]  # ids that open every conversation
    close: list[int]  # ids written after the end token of a generated message
    end_id: int  # the token that ends a message (the stop token when sampling)
    pad_id: int

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)

    def encode(self, text: str) -> list[int]:
        """Token ids of untrusted text; special-token strings in it stay plain text."""
        return self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)

    def decode(self, ids: list[int]) -> str:
        """Text of generated ids, without the end token or padding."""
        ids = [i for i in ids if i not in (self.end_id, self.pad_id)]
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @property
    def special_ids(self) -> set[int]:
        """Ids that never occur inside a message's text (`encode` never yields them)."""
        added = getattr(self.tokenizer, "added_tokens_decoder", {})
        special = {int(i) for i, token in added.items() if getattr(token, "special", False)}
        return special | {int(i) for i in self.tokenizer.all_special_ids} | {self.end_id, self.pad_id}


class Codec(TextIds):
    """Text <-> token ids for conversations marked with the role tokens (the default model's).

    A message is ``<|role|> text <|end|>``; a conversation is its messages' ids concatenated.
    Token-level envs use it to build the same ids the model sees (`turn`) and to decode actions.
    `tokenizer` must hold the role tokens (`LM` adds them to foreign tokenizers).
    """

    kind = "roles"

    def __init__(self, tokenizer) -> None:
        missing = missing_special_tokens(tokenizer)
        if missing:
            raise ValueError(
                f"tokenizer lacks the role tokens {missing}; load it through rehearsal_gym.core.model.LM"
            )
        super().__init__(tokenizer)
        vocab = tokenizer.get_vocab()
        self.pad_id = vocab[PAD]
        self.end_id = vocab[END]
        self.role_ids = {role: vocab[token] for role, token in ROLE_TOKENS.items()}
        self.start, self.close = [], []

    def turn(self, role: str, text: str) -> list[int]:
        """One message: role token, text, end token."""
        return [self.role_ids[role], *self.encode(text), self.end_id]

    def prompt(self, role: str) -> list[int]:
        """What opens a message the model writes in `role`: its role token."""
        return [self.role_ids[role]]

    def head(self, role: str) -> list[int]:
        """What precedes the text in a message of `role` (`turn`): its role token."""
        return [self.role_ids[role]]

    @property
    def special_ids(self) -> set[int]:
        return set(self.role_ids.values()) | {self.pad_id, self.end_id}
