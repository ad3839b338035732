"""Atomic file writes: a save either completes or leaves the old file exactly as it was.

Every helper that writes a file (checkpoints, tokenizers) goes through `atomic_write`:
the data goes to a temporary file in the same directory, is flushed to disk (fsync),
and only then renamed over the target with `os.replace`, which is atomic on POSIX and
Windows. If anything fails on the way (a full disk, an unpicklable object, Ctrl-C),
the temporary file is removed and the old file, if any, is untouched.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "note.txt"
    >>> with atomic_write(path, "w") as f:
    ...     _ = f.write("hello")
    >>> path.read_text()
    'hello'
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def check_path(name: str, path) -> Path:
    """Return ``path`` as a `Path` if it is a str or os.PathLike naming a file (not a directory)."""
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    text = os.fspath(path)
    if isinstance(text, bytes) or not text.strip():
        raise ValueError(f"{name} must be a non-empty str path, got {text!r}")
    if "\0" in text:
        raise ValueError(f"{name} {text!r} contains a NUL byte, which no file name may hold")
    if text.endswith(("/", os.sep)) or (os.altsep and text.endswith(os.altsep)):
        raise ValueError(f"{name} {text!r} ends with a separator: it names a folder; give a file name inside it")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a directory; give a file name inside it")
    return path


def _start(name: str, max_bytes: int) -> str:
    """The longest start of ``name`` whose file-system encoding fits in ``max_bytes``."""
    while len(os.fsencode(name)) > max_bytes:
        name = name[: len(name) * 3 // 4]
    return name


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb", *, encoding: str | None = None, name: str = "path"):
    """Open a temporary file next to ``path`` for writing; on success, replace ``path`` with it.

    Creates missing parent directories. A symlink is written through: its target gets the new
    bytes (atomically, next to the target) and the link stays. ``mode`` is "wb" or "w" (text, then ``encoding``).
    A file that is replaced keeps its permission bits (a private file stays private); a new
    one gets those a plain ``open`` would give. Any legal file name works, up to NAME_MAX.
    Errors: TypeError/ValueError for a bad ``path``; OSError (naming ``path``) when the
    directory cannot be written; any exception raised inside the block propagates, and
    in every case no temporary file is left behind.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    path = check_path(name, path)
    if path.is_symlink():  # write through a link (a linked file is updated, the link stays a link)
        path = Path(os.path.realpath(path))
        if path.is_dir():
            raise ValueError(f"{name} is a link to the directory {path}; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # The temp name must be legal wherever the target's is: a 255-byte name plus the random part
        # and ".tmp" would pass NAME_MAX, so only the start of the name goes into it.
        fd, tmp = tempfile.mkstemp(prefix=f".{_start(path.name, 64)}.", suffix=".tmp", dir=path.parent)
    except (FileExistsError, NotADirectoryError):
        raise NotADirectoryError(f"cannot write {path}: a part of {path.parent} is a file, not a directory") from None
    except OSError as e:
        raise type(e)(e.errno, f"cannot write {path}: {e.strerror} (is the directory writable?)") from None
    try:
        # mkstemp makes the file private (0600); give it the target's mode if it exists (a private
        # file stays private), else the mode a plain open() would.
        os.close(fd)
        try:
            bits = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            bits = 0o666 & ~_umask()
        os.chmod(tmp, bits)
        with open(tmp, mode, encoding=encoding if "b" not in mode else None) as f:  # f.name: the temp path
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable (POSIX; no-op elsewhere)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
