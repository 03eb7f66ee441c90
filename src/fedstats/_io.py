"""Atomic file writes: results are written to a temporary file and renamed, never left half-written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def atomic_write_bytes(
    path: Path | str, data: bytes, *, mode: int | None = None, durable: bool = False
) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and an atomic rename.

    The folder is created if needed. On any error the temporary file is removed and ``path`` is
    untouched. The file gets ``mode`` if given (``0o600`` for a private key: the temporary file has it
    from its creation, so the key is never readable by others, not even briefly), else the usual
    permissions (those of the file it replaces, else ``0o666`` less the umask). With ``durable`` the
    file is flushed to disk (``fsync``) before the rename and the folder after it, so the new content
    survives a power loss once this returns (a device's budget file, before it uploads).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        if mode is None:
            mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Flush a folder's entries (a rename in it) to disk; a no-op where folders cannot be opened."""
    try:
        dfd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # Windows: folders are not opened so
        return
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(
    path: Path | str, text: str, *, mode: int | None = None, durable: bool = False
) -> None:
    """Write ``text`` (UTF-8) atomically; see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode, durable=durable)
