"""Reading files from elsewhere: bounded, regular files only, and errors that name the file.

A downloaded file is hostile until checked: a few kilobytes can claim a billion layers, a
header of 2**63 bytes or a tensor a terabyte wide. Every loader in ``helpers`` reads through
these functions, which

- open regular files only (a FIFO would block `open`, ``/dev/zero`` never ends);
- refuse a file larger than the limit for its kind *before* reading it, and read it once,
  so a hash is checked on the very bytes that are then parsed;
- parse JSON strictly (duplicate keys, NaN/Infinity, 1e999 and 4300-digit numbers refused);
- run ``torch.load(weights_only=True)`` and turn its refusal into a message that names the
  file and never suggests turning the safety off;
- confine a name read from a file (a ``refs/main`` of the Hugging Face cache) to its folder.

Each raises ValueError (OSError for a missing or unreadable file) naming the file.

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "config.json"
    >>> _ = p.write_text('{"n_layer": 12}')
    >>> load_json(p, "config file", limit=1 << 20)
    {'n_layer': 12}
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import stat
import warnings
from pathlib import Path

import torch

JSON_LIMIT = 64 << 20  # bytes; GPT-2's vocab.json is 1 MB, a trained BPE file a few MB


def open_regular(path, what: str = "file"):
    """Open ``path`` for binary reading if it is a regular file (no FIFO, device or folder)."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO would block a plain open
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a pipe or a device?)"
            raise ValueError(f"{path} is {kind}; a {what} must be a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path, what: str = "file", *, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, read once."""
    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise ValueError(f"{path} is {size} bytes, more than a {what} may have ({limit}); refusing to read it")
        raw = f.read(size + 1)  # read(n) reserves n bytes at once: ask for what the file holds
    if len(raw) != size:
        raise ValueError(f"{path} changed size while being read ({size} bytes, then {len(raw)}); refusing it")
    return raw


def read_text(path, what: str = "file", *, limit: int) -> str:
    raw = read_bytes(path, what, limit=limit)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not a {what}: byte {e.start} is not UTF-8 text") from None


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _finite(token: str) -> float:
    value = float(token)
    if value in (float("inf"), float("-inf")):  # 1e999: json.loads would give inf, which NaN checks miss
        raise ValueError(f"the number {token[:40]} is too large for a float")
    return value


def parse_json(text: str, source: str, what: str):
    """JSON from ``text``, strictly; ValueError names ``source`` (duplicate keys are refused: two
    readers would keep different ones)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError(f"{source} is not a {what}: its JSON is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, duplicate keys, NaN, a number of more than 4300 digits
        raise ValueError(f"{source} is not a {what}: invalid JSON ({e})") from None


def load_json(path, what: str = "JSON file", *, limit: int = JSON_LIMIT):
    """Parse a JSON file of at most ``limit`` bytes (see `parse_json`)."""
    return parse_json(read_text(path, what, limit=limit), str(path), what)


def _unpickler_reason(message: str) -> str:
    """The useful part of torch's long weights_only error, e.g. 'unsupported global posix.system'.

    Never torch's whole text: it goes on to advise ``weights_only=False``, which would run the code.
    """
    m = re.search(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)", message)
    if m:
        return m.group(0)
    m = re.search(r"Unsupported operand \d+", message)
    return m.group(0) if m else "a pickle instruction the safe loader does not allow"


def torch_load(data, source: str, what: str = "torch file"):
    """``torch.load(data, weights_only=True)`` on the CPU; ``data`` is a path or bytes.

    Raises ValueError naming ``source``: "carries pickled code" (nothing was run) or "corrupt".
    """
    stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        with warnings.catch_warnings():
            # A foreign pickle protocol only earns a warning before the file is refused or read.
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(stream, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        reason = _unpickler_reason(str(e))
        if "global" in reason.lower():
            raise ValueError(f"refused to load {source}: it carries pickled code or objects ({reason}), which "
                             "weights_only=True does not allow; nothing in it was run") from None
        raise ValueError(f"refused to load {source}: it is corrupt or not a {what} ({reason}); "
                         "nothing in it was run") from None
    except Exception as e:  # torch raises RuntimeError, EOFError, IndexError... for damaged files
        detail = (str(e).strip().splitlines() or [""])[0][:200]
        if "weights_only" in detail:  # never pass on advice to turn the safety off
            detail = "refused by the safe loader"
        raise ValueError(f"{source} is not a readable {what} (corrupt or truncated): "
                         f"{type(e).__name__}: {detail}") from None


def confined(folder, name, what: str) -> Path:
    """``folder / name`` for a ``name`` read from a file: one plain path component that stays in ``folder``."""
    folder = Path(folder)
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or "\0" in name or len(name) > 255 or Path(name).is_absolute() or ":" in name):
        raise ValueError(f"{what} {name!r} is not a plain folder name inside {folder}; refusing to follow it")
    target = folder / name
    if not target.resolve().is_relative_to(folder.resolve()):
        raise ValueError(f"{what} {name!r} leads outside {folder} (a link?); refusing to follow it")
    return target
