"""Atomic writes of whole directories (model checkpoints, trainer checkpoints, caches).

A write goes to a temporary sibling ``.NAME.XXXX`` and is renamed into place; the previous
version is moved aside to ``.NAME.old`` for the instant between the two renames. A process killed
at any point therefore leaves either the old or the new complete directory, and `recover` (called
before every write and by the loaders) puts the old one back if the kill fell between the renames.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _old(path: Path) -> Path:
    return path.with_name(f".{path.name}.old")


def recover(path: str | os.PathLike) -> Path:
    """Restore `path` after a write killed between its renames, and drop leftover temporaries.

    Assumes one writer per path (a trainer owns its checkpoint directory)."""
    path = Path(path)
    old = _old(path)
    if old.is_dir():
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, path)
    if path.parent.is_dir():
        for stale in path.parent.glob(f".{path.name}.*"):
            if stale.is_dir() and stale != old:
                shutil.rmtree(stale, ignore_errors=True)
    return path


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory beside `path`; when the block ends without an error it
    replaces `path` whole. A crash inside the block leaves the previous `path` untouched."""
    path = recover(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield tmp
        old = _old(path)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
