"""Atomic writes of whole directories (model checkpoints, trainer checkpoints, caches).

A write goes to a temporary sibling ``.NAME.XXXX`` and is renamed into place; the previous
version is moved aside to ``.NAME.old`` for the instant between the two renames. A process killed
at any point therefore leaves either the old or the new complete directory, and `recover` (called
before every write and by the loaders) puts the old one back if the kill fell between the renames.

Writers and `recover` hold an exclusive lock on the parent directory (``flock``), so two processes
that write the same cache at once (two training runs building the same analyst warm start) take
turns: one never deletes the other's temporary as a leftover, nor restores ``.NAME.old`` under it
between its renames. The last writer's version stays.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: writers are not serialized
    fcntl = None


def _old(path: Path) -> Path:
    return path.with_name(f".{path.name}.old")


@contextlib.contextmanager
def _parent_lock(path: Path) -> Iterator[None]:
    """Exclusive lock on `path`'s parent directory for the block (no lock file is created).

    Where the platform or file system has no ``flock`` the block runs unlocked, as before."""
    fd = None
    if fcntl is not None:
        try:
            fd = os.open(path.parent, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            if fd is not None:
                os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _recover_unlocked(path: Path) -> None:
    old = _old(path)
    if old.is_dir():
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, path)
    for stale in path.parent.glob(f".{path.name}.*"):
        if stale.is_dir() and stale != old:
            shutil.rmtree(stale, ignore_errors=True)


def recover(path: str | os.PathLike) -> Path:
    """Restore `path` after a write killed between its renames, and drop leftover temporaries.

    Waits for a write of `path` in progress in another process (or thread) to finish first."""
    path = Path(path)
    if path.parent.is_dir():
        with _parent_lock(path):
            _recover_unlocked(path)
    return path


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory beside `path`; when the block ends without an error it
    replaces `path` whole. A crash inside the block leaves the previous `path` untouched.

    The block holds the lock on `path`'s parent directory: other writers there wait for it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _parent_lock(path):
        _recover_unlocked(path)
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
