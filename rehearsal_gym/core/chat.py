"""Conversations in a model's own chat template, with exact per-turn token ids.

An instruct model should see the format it was trained on, but training needs the ids of each
turn on their own: the ids trained on must be the ids sampled, and a conversation grows one turn
at a time. So the template is rendered once, on a probe conversation whose contents are
sentinels, to find the text it writes around each chat role's content; a conversation's ids are
then the concatenation of those scaffolds (special tokens parsed) and each content's ids (special
tokens kept as text, so hostile content cannot forge a turn). The layout is accepted only if the
template is prefix-consistent on the probe (each rendering is a prefix of the next; a role's
scaffold is the same wherever the role appears; the generation prompt is the assistant's
scaffold; an assistant message ends with one special token, the stop token). Otherwise
`chat_layout` raises `TemplateError` with the reason, and the model falls back to role tokens.

Roles of this package -> chat roles: task, sim -> user; agent -> assistant; env (a tool result in
the agent's conversation) -> tool; skill -> system. Every generated message (an agent turn, an
imagined tool result, an analyst's skill) is the assistant's.
"""

from __future__ import annotations

from dataclasses import dataclass

from rehearsal_gym.core.tokenizer import TextIds

SYSTEM_PROMPT = "You are a careful assistant that solves the user's request by calling tools."
CHAT_ROLES = {"task": "user", "sim": "user", "agent": "assistant", "env": "tool", "skill": "system"}
_SENTINEL = "QZX{}ZXQ"


class TemplateError(ValueError):
    """The tokenizer's chat template cannot give exact per-turn ids (the message says why)."""


@dataclass(frozen=True)
class ChatLayout:
    """What a chat template writes around each message, as token ids."""

    start: tuple[int, ...]  # conversation start through the system message
    around: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]  # chat role -> (before, after) content
    generation: tuple[int, ...]  # what add_generation_prompt writes (the assistant's "before")
    stop_id: int  # the special token that ends an assistant message
    close: tuple[int, ...]  # what the template writes after the stop token


def _render(tokenizer, messages: list[dict[str, str]], generation: bool = False) -> str:
    try:
        out = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
    except Exception as e:  # noqa: BLE001 - a template may raise anything (jinja exceptions)
        roles = " -> ".join(m["role"] for m in messages)
        raise TemplateError(f"the template cannot render the conversation {roles}: {str(e)[:120]}") from None
    if not isinstance(out, str):
        raise TemplateError(f"the template rendered {type(out).__name__}, not text")
    return out


def chat_layout(tokenizer, system_prompt: str = SYSTEM_PROMPT) -> ChatLayout:
    """The layout of `tokenizer`'s chat template; raises `TemplateError` with the reason if the
    template is missing or not prefix-consistent on a probe conversation."""
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError("the tokenizer has no chat template")
    # every role twice (where the package uses it twice), in the orders rollouts produce
    order = ["user", "assistant", "tool", "assistant", "system", "user", "assistant", "tool", "assistant"]
    probe = [{"role": "system", "content": system_prompt}]
    probe += [{"role": r, "content": _SENTINEL.format(i)} for i, r in enumerate(order)]
    renders = [_render(tokenizer, probe[: k + 1]) for k in range(len(probe))]
    around: dict[str, tuple[str, str]] = {}
    for k in range(1, len(probe)):
        prev, cur, role = renders[k - 1], renders[k], probe[k]["role"]
        if not cur.startswith(prev):
            raise TemplateError(
                f"not prefix-consistent: adding a {role} message (message {k + 1}) rewrites the text "
                "rendered before it"
            )
        delta, sentinel = cur[len(prev) :], probe[k]["content"]
        if delta.count(sentinel) != 1:
            raise TemplateError(f"a {role} message's content is not rendered verbatim once")
        pair = tuple(delta.split(sentinel))
        if around.setdefault(role, pair) != pair:
            raise TemplateError(f"{role} messages are rendered differently at different positions")
        if role == "assistant":
            generated = _render(tokenizer, probe[:k], generation=True)
            if generated != prev + pair[0]:
                raise TemplateError(
                    "the generation prompt (add_generation_prompt) is not how an assistant message begins"
                )
    if system_prompt not in renders[0]:
        raise TemplateError("the template does not show the system message")

    def ids(text: str) -> tuple[int, ...]:
        return tuple(tokenizer.encode(text, add_special_tokens=False))

    after = ids(around["assistant"][1])
    special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    if not after or after[0] not in special:
        raise TemplateError(
            f"an assistant message ends with {around['assistant'][1][:20]!r}, not with a special stop token"
        )
    return ChatLayout(
        start=ids(renders[0]),
        around={role: (ids(before), ids(end)) for role, (before, end) in around.items()},
        generation=ids(around["assistant"][0]),
        stop_id=after[0],
        close=after[1:],
    )


class ChatCodec(TextIds):
    """Text <-> token ids for conversations in the tokenizer's chat template (see the module doc).

    Same interface as `Codec`: `start`, `turn(role, text)`, `prompt(role)`, `end_id`, `close`.
    """

    kind = "chat"

    def __init__(self, tokenizer, layout: ChatLayout | None = None) -> None:
        super().__init__(tokenizer)
        self.layout = layout or chat_layout(tokenizer)
        self.start = list(self.layout.start)
        self.close = list(self.layout.close)
        self.end_id = self.layout.stop_id
        pad = tokenizer.pad_token_id
        self.pad_id = self.end_id if pad is None else int(pad)

    def turn(self, role: str, text: str) -> list[int]:
        """One message of `role` (task, agent, env, skill, sim) in the template's scaffold."""
        before, after = self.layout.around[CHAT_ROLES[role]]
        return [*before, *self.encode(text), *after]

    def head(self, role: str) -> list[int]:
        """What precedes the text in a message of `role` (`turn`)."""
        return list(self.layout.around[CHAT_ROLES[role]][0])

    def prompt(self, role: str) -> list[int]:
        """What opens a message the model writes: the template's generation prompt, for any role."""
        if role not in CHAT_ROLES:
            raise KeyError(role)
        return list(self.layout.generation)
