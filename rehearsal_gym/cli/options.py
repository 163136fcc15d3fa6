"""Command-line options generated from config dataclasses, and NAME=PATH arguments.

A config's fields are documented once, where they are declared (``lr: PositiveFloat = 2e-5  # AdamW
learning rate``); the CLI shows the same words as each option's help line, its type and choices come
from the annotation, and its checks run when the config is built (`rehearsal_gym.core.checks`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import typing
from pathlib import Path
from typing import Any

from rehearsal_gym.core.checks import base_type


def field_help(cls: type) -> dict[str, str]:
    """``{field name: help}`` for a dataclass: the comment lines directly above a field and the
    comments on its own lines, joined; "" for a field without comments."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    (node,) = ast.parse(source).body
    helps: dict[str, str] = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above: list[str] = []
        line = stmt.lineno - 1
        while line in comments and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        beside = [
            comments[n] for n in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1) if n in comments
        ]
        helps[stmt.target.id] = " ".join(above + beside)
    return helps


def _flag_type(hint: Any) -> tuple[type, tuple | None]:
    """(argparse type, choices) of a field's annotation: Literal -> its values, Annotated -> its base."""
    if typing.get_origin(hint) is typing.Literal:
        return type(typing.get_args(hint)[0]), typing.get_args(hint)
    return base_type(hint)[0], None


def add_config_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per field of the config dataclass `cls`, named after the field (``--kl-coef``),
    with its comment as help, its default shown, a Literal's values as choices and booleans as
    ``--x/--no-x``; a nested dataclass field (a section) becomes an argument group of its fields."""
    helps = field_help(cls)
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            doc = " ".join((hint.__doc__ or "").split())
            add_config_options(parser.add_argument_group(f"{f.name} ({doc})" if doc else f.name), hint)
            continue
        flag, text = "--" + f.name.replace("_", "-"), helps[f.name].replace("%", "%%")
        kind, choices = _flag_type(hint)
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=text)
        else:
            parser.add_argument(flag, type=kind, default=f.default, choices=choices, help=text)


def config_from_args(cls: type, args: argparse.Namespace) -> Any:
    """The config dataclass `cls` from options added by `add_config_options` (sections rebuilt)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    values = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        values[f.name] = (
            config_from_args(hint, args) if dataclasses.is_dataclass(hint) else getattr(args, f.name)
        )
    return cls(**values)


def named_paths(specs: list[str], flag: str, require_name: bool = False) -> dict[str, str]:
    """``{name: path}`` of NAME=PATH arguments. Without `require_name`, a bare PATH names itself, and
    an argument that is an existing path is a path even if it holds "=" (a directory name may)."""
    out: dict[str, str] = {}
    for spec in specs:
        if "=" in spec and (require_name or not Path(spec).exists()):
            name, _, path = spec.partition("=")
        elif require_name:
            raise ValueError(f"{flag} takes NAME=PATH, got {spec!r}")
        else:
            name = path = spec
        if not name or not path:
            raise ValueError(f"{flag} takes NAME=PATH, got {spec!r}")
        if name in out:
            raise ValueError(f"{flag} names {name!r} twice")
        out[name] = path
    return out
