"""Help text for config dataclasses, read from the comments written beside their fields.

A config's fields are documented once, where they are declared (``lr: float = 2e-5  # AdamW
learning rate``); the CLI shows the same words as each option's help line.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize


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
