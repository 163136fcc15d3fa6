"""TokenEnv: any text env here (real or SelfSim) as a token-level env for standard RL libraries.

One action is one token (``Discrete(vocab)``). The observation is the conversation so far as the
language model sees it (``<|task|> request <|end|> <|agent|> turn <|end|> <|env|> result <|end|>
<|agent|> ...`` with the role tokens, or the model's chat template when its `LM` speaks it,
followed by the tokens of the turn being written), right-padded to a fixed
``window``: ``{"input_ids": Box(int64, (window,)), "attention_mask": Box(int64, (window,))}``.
Choosing the end token (or reaching ``max_turn_tokens``) sends the decoded turn to the inner env;
the inner env's reward is given on that step, and its ``terminated``/``truncated`` end the episode.

`action_masks()` gives the tokens that keep the turn valid under the tool-call grammar of the
current tools (`rehearsal_gym.core.grammar`), for sb3-contrib's MaskablePPO: a masked policy only ever
sends turns that parse. The grammar is the ``"text"`` call format's; under an inner env with
``call_format="json"`` the masks allow every token (no constraint). Without masks any token may
be chosen; the inner env then answers a malformed turn with its usual ``error: ...`` observation.

Context policy (as in `rehearsal_gym.core.rollout`): when the conversation leaves no room for another
full turn in the window, the episode ends with ``truncated=True`` and
``info["context_overflow"] = True``; nothing is cut silently.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rehearsal_gym.core.grammar import TokenMasker, TurnGrammar
from rehearsal_gym.core.tokenizer import Codec, TextIds


def as_codec(tokenizer: Any = None) -> TextIds:
    """A codec from an `LM` (its own: role tokens or chat template), a codec, a Hugging Face
    tokenizer with the role tokens, or None (the embedded default tokenizer)."""
    if tokenizer is None:
        from rehearsal_gym.defaults import default_tokenizer

        return Codec(default_tokenizer())
    if isinstance(tokenizer, TextIds):
        return tokenizer
    if hasattr(tokenizer, "codec"):  # an LM
        return tokenizer.codec
    return Codec(tokenizer)


class TokenEnv(gym.Env):
    """Token-level view of a text env; see the module docstring.

    Args:
        env: an env id (made with ``env_kwargs``) or a text env instance (e.g. ``SelfSim-v0``).
        tokenizer: `LM`, `Codec`, HF tokenizer with the role tokens, or None for the default.
        window: observation length in tokens (the context budget of an episode).
        max_turn_tokens: longest turn; reaching it sends the turn as if the end token were chosen.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        env: gym.Env | str,
        tokenizer: Any = None,
        *,
        window: int = 512,
        max_turn_tokens: int = 96,
        env_kwargs: dict[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        for name, value in (("window", window), ("max_turn_tokens", max_turn_tokens)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TokenEnv.{name} must be a positive int, got {value!r}")
        if max_turn_tokens + 2 > window:
            raise ValueError(
                f"TokenEnv.window ({window}) must exceed max_turn_tokens + 2 ({max_turn_tokens + 2})"
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"TokenEnv.render_mode must be one of {self.metadata['render_modes']} or None")
        self.env = gym.make(env, **dict(env_kwargs or {})) if isinstance(env, str) else env
        self.codec = as_codec(tokenizer)
        self.window, self.max_turn_tokens, self.render_mode = window, max_turn_tokens, render_mode
        vocab = self.codec.vocab_size
        self.action_space = spaces.Discrete(vocab)
        self.observation_space = spaces.Dict(
            {
                "input_ids": spaces.Box(0, vocab - 1, (window,), np.int64),
                "attention_mask": spaces.Box(0, 1, (window,), np.int64),
            }
        )
        self.masker = TokenMasker.from_codec(self.codec)
        self._room = max_turn_tokens + 1 + len(self.codec.close)  # a full turn, its end token, close
        self._grammars: dict[tuple[str, ...], TurnGrammar] = {}
        self.ids: list[int] = []
        self.turn: list[int] = []
        self._state: Any = None
        self._free = False  # the inner env's call format has no grammar here
        self._grammar: TurnGrammar | None = None

    # -- gymnasium API ------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options=options)
        self.ids = [*self.codec.start, *self.codec.turn("task", obs), *self.codec.prompt("agent")]
        if len(self.ids) + self._room > self.window:
            raise ValueError(
                f"TokenEnv.window ({self.window}) is too small: the task prompt alone takes "
                f"{len(self.ids)} tokens plus a turn of up to {self.max_turn_tokens}"
            )
        self._start_turn()
        return self._obs(), dict(info)

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action must be a token id in [0, {self.action_space.n}), got {action!r}")
        if self._grammar is None:
            raise RuntimeError("call reset() before step()")
        token = int(action)
        if token != self.codec.end_id:
            self.turn.append(token)
            self.ids.append(token)
            if self._state is not None:
                self._state = self.masker.advance(self._grammar, self._state, token)
            if len(self.turn) < self.max_turn_tokens:
                return self._obs(), 0.0, False, False, {}
        # the turn is over: send it to the text env
        text = self.codec.decode(self.turn)
        obs, reward, terminated, truncated, info = self.env.step(text)
        info = {**info, "turn_text": text}
        self.ids += [self.codec.end_id, *self.codec.close]
        if not (terminated or truncated):
            self.ids += [*self.codec.turn("env", obs), *self.codec.prompt("agent")]
            if len(self.ids) + self._room > self.window:
                truncated, info["context_overflow"] = True, True
                self.ids = self.ids[: self.window]
        self._start_turn()
        return self._obs(), float(reward), bool(terminated), bool(truncated), info

    def action_masks(self) -> np.ndarray:
        """Tokens that keep the current turn valid under the tool-call grammar (MaskablePPO).

        After a token outside the grammar (a policy that ignores masks), only the end token. Under
        an inner env with another call format, every token."""
        if self._free:
            return np.ones(self.action_space.n, dtype=bool)
        if self._state is None or self._grammar is None:
            mask = np.zeros(self.action_space.n, dtype=bool)
            mask[self.codec.end_id] = True
            return mask
        mask = self.masker.mask(self._grammar, self._state).copy()
        if not mask.any():  # no token continues the turn (cannot happen for these schemas): end it
            mask[self.codec.end_id] = True
        return mask

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        inner = self.env.render() if getattr(self.env, "render_mode", None) == "ansi" else ""
        return f"{inner or ''}\n[writing] {self.codec.decode(self.turn)}"

    def close(self) -> None:
        self.env.close()

    # -- helpers ------------------------------------------------------------------------------
    def _start_turn(self) -> None:
        self.turn = []
        self._free = getattr(self.env.unwrapped, "call_format", "text") != "text"
        tools = self.env.unwrapped.tools
        key = tuple(sorted(tools))
        if key not in self._grammars:
            self._grammars[key] = TurnGrammar(tools)
        self._grammar = self._grammars[key]
        self._state = self._grammar.initial()

    def _obs(self) -> dict[str, np.ndarray]:
        n = len(self.ids)
        ids = np.full(self.window, self.codec.pad_id, dtype=np.int64)
        ids[:n] = self.ids
        mask = np.zeros(self.window, dtype=np.int64)
        mask[:n] = 1
        return {"input_ids": ids, "attention_mask": mask}
