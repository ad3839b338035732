"""From a corpus to training batches for a next-token language model.

- `load_corpus("pydoc")`: the default text, Python's own documentation topics, frozen in
  ``data/pydoc_topics.txt`` (made once from CPython 3.11.7's ``pydoc_data.topics``: 79
  topics joined in sorted key order with ``"\\n"``, 465,048 characters; PSF licence, see
  ``data/README.md``). The file is checked against its sha256 when loaded, so every Python
  version and OS trains on the same text (the live module differs between versions).
- `load_corpus("songci")`: the Song ci (宋词) of the ``chinese-poetry`` collection, 21,050 ci,
  2,059,792 characters (notebook 08, ``load_pretrained("char_gpt_zh")``), shipped
  bz2-compressed in ``data/songci.txt.bz2`` (MIT licence, see ``data/README.md``); the sha256
  is checked on the decompressed UTF-8 text.
- `split_documents(text, val_fraction)`: a split by whole documents (one ci each), so no
  validation window is a copy of training text.
- `train_val_split(data, val_fraction, chunks=1)`: the first part trains, the last part validates
  (contiguous, not shuffled, so validation text was never seen as a neighbour); ``chunks=k``
  does that inside each of k equal pieces, so validation samples the whole corpus.
- `get_batch(data, block_size, batch_size)`: random windows; ``y`` is ``x`` shifted one
  token to the left, so ``y[b, t]`` is the token that follows ``x[b, :t + 1]``. With
  ``starts=document_starts(text, block_size)`` every window begins where a ci begins.

Shapes: B = batch_size, T = block_size, N = number of tokens.
    get_batch(data (N,), T, B) -> x (B, T) int64, y (B, T) int64

Example:
    >>> data = torch.arange(10)
    >>> x, y = get_batch(data, block_size=4, batch_size=2, generator=torch.Generator().manual_seed(0))
    >>> bool((y[:, :-1] == x[:, 1:]).all()), tuple(x.shape)
    (True, (2, 4))
"""

from __future__ import annotations

import bz2
import hashlib
from pathlib import Path

import torch

from helpers.untrusted import read_bytes
from helpers.validate import check_int, check_tensor

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
# name -> (file in data/, sha256 of its UTF-8 bytes; of the decompressed bytes for a .bz2 file,
# and the number of those bytes: nothing larger is read or decompressed)
CORPORA = {
    "pydoc": ("pydoc_topics.txt", "2a95af4ac93f5b719944030ce3769070ddf827d847cba42192afa8da989e5dc4", 466_195),
    "songci": ("songci.txt.bz2", "469af004cff30784073fda2943ca22c2238ad755eb92e0dcd6e7b8cee0581305", 5_734_701),
}
DOCUMENT_SEPARATOR = "\n\n"  # between two ci of the songci corpus (each ends with its own "\n")


def load_corpus(name: str = "pydoc") -> str:
    """Return the named built-in corpus as one string, after checking its sha256.

    The file is read through `helpers.untrusted.read_bytes` (regular files only: a FIFO or a
    link to ``/dev/zero`` is refused, not read forever) and never beyond the corpus's known
    size; a compressed corpus is decompressed only to one byte past it (a bz2 bomb stops there).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; valid names: {', '.join(CORPORA)}")
    filename, expected, size = CORPORA[name]
    path = DATA_DIR / filename
    restore = "the file was changed or damaged (restore it with git checkout data/)"
    try:
        raw = read_bytes(path, f"corpus file ({name})", limit=size)  # compressed, it is smaller still
    except OSError as err:
        raise ValueError(f"corpus {name!r}: cannot read {filename} in the repository's data/ folder ({err.strerror})") from None
    except ValueError as err:
        raise ValueError(f"corpus {name!r}: {err}; {restore}") from None
    if filename.endswith(".bz2"):
        raw = _bunzip2(raw, size, f"corpus {name!r}: data/{filename}", restore)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != expected:
        raise ValueError(f"corpus {name!r}: data/{filename} has sha256 {digest[:12]}..., expected {expected[:12]}...; "
                         + restore)
    # newline="" semantics: the bytes are the text; no platform newline translation.
    return raw.decode("utf-8")


def _bunzip2(raw: bytes, size: int, label: str, restore: str) -> bytes:
    """The bz2 stream(s) in ``raw``, decompressed to at most ``size + 1`` bytes (enough to see it is too long)."""
    out, rest = [], raw
    try:
        while rest:
            d = bz2.BZ2Decompressor()
            out.append(d.decompress(rest, max_length=size + 1 - sum(map(len, out))))
            if sum(map(len, out)) > size:
                raise ValueError(f"{label} decompresses to more than the corpus's {size} bytes; {restore}")
            if not d.eof:
                raise EOFError
            rest = d.unused_data
    except (OSError, ValueError, EOFError) as e:
        if isinstance(e, ValueError) and str(e).startswith(label):
            raise
        raise ValueError(f"{label} is not a complete bz2 file; {restore}") from None
    return b"".join(out)


def train_val_split(data, val_fraction: float = 0.1, chunks: int = 1):
    """Split a sequence (tensor, list or str) into (train, val); val gets round(N * val_fraction) items.

    ``chunks=1`` (the default): the last part validates. ``chunks=k``: cut the data into
    ``k`` equal pieces and keep the last ``val_fraction`` of each for validation, so val
    samples the whole corpus. The pydoc corpus is sorted by topic, and its last 10 % is
    easier than the rest (a bigram table scores it better out of sample than in sample);
    with ``chunks=10`` it is not (numbers in notebook 07).
    """
    if not isinstance(data, (torch.Tensor, list, tuple, str)):
        raise TypeError(f"data must be a 1-D tensor, list, tuple or str, got {type(data).__name__}")
    if isinstance(data, torch.Tensor) and data.dim() != 1:
        raise ValueError(f"data must be 1-D, got shape {tuple(data.shape)}")
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)):
        raise TypeError(f"val_fraction must be a float, got {type(val_fraction).__name__}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    check_int("chunks", chunks, minimum=1)
    n = len(data)
    if chunks > 1:
        if chunks > n:
            raise ValueError(f"chunks ({chunks}) must not exceed the number of items ({n})")
        cuts = [n * i // chunks for i in range(chunks + 1)]  # k + 1 boundaries, pieces differ by <= 1 item
        smallest = n // chunks
        if round(smallest * val_fraction) == 0 or round(smallest * val_fraction) == smallest:
            raise ValueError(f"chunks={chunks} cuts {n} items into pieces of {smallest}: val_fraction={val_fraction} "
                             "of a piece leaves an empty train or val part; use fewer chunks")
        parts = [train_val_split(data[a:b], val_fraction) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        return _concat([p[0] for p in parts]), _concat([p[1] for p in parts])
    n_val = round(n * val_fraction)
    if n_val == 0 or n_val == n:
        raise ValueError(f"val_fraction={val_fraction} of {n} items of data leaves an empty train or val part")
    return data[: n - n_val], data[n - n_val :]


def split_documents(text: str, val_fraction: float = 0.1, sep: str = DOCUMENT_SEPARATOR) -> tuple[str, str]:
    """Split ``text`` into (train, val) by whole documents: the last ``round(n * val_fraction)`` validate.

    Documents are the pieces between ``sep`` (one ci each in the songci corpus). Each part
    keeps the separator after every document, so ``train + val == text`` when ``text`` ends
    with ``sep``; a window drawn from val never holds a line of a training document.
    """
    check_text_arg("text", text)
    check_text_arg("sep", sep)
    if not sep:
        raise ValueError("sep must not be empty")
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)):
        raise TypeError(f"val_fraction must be a float, got {type(val_fraction).__name__}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    docs = [d for d in text.split(sep) if d]
    n_val = round(len(docs) * val_fraction)
    if n_val == 0 or n_val == len(docs):
        raise ValueError(f"val_fraction={val_fraction} of {len(docs)} documents leaves an empty train or val part")
    train, val = docs[: len(docs) - n_val], docs[len(docs) - n_val :]
    return "".join(d + sep for d in train), "".join(d + sep for d in val)


def document_starts(text: str, block_size: int, sep: str = DOCUMENT_SEPARATOR) -> torch.Tensor:
    """Character offsets of the separator in front of each document of ``text``, as a window start.

    A window drawn from these offsets (``get_batch(..., starts=...)``) opens exactly as a
    prompt made by `helpers.ci_form.tune_prompt` does: the blank line, then the tune name at
    positions 2, 3, ... Offsets whose window of ``block_size + 1`` characters would run past the
    end are left out. Offsets count characters, so they index a character-level encoding.
    """
    check_text_arg("text", text)
    check_text_arg("sep", sep)
    check_int("block_size", block_size, minimum=1)
    if not sep:
        raise ValueError("sep must not be empty")
    found, i = [], text.find(sep)
    while i >= 0:
        if i + len(sep) < len(text) and i + block_size + 1 <= len(text):  # a document follows; the window fits
            found.append(i)
        i = text.find(sep, i + len(sep))
    if not found:
        raise ValueError(f"text holds no document start with a window of {block_size} + 1 characters after it")
    return torch.tensor(found)  # (number of documents,)


def check_text_arg(name: str, value) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")


def _concat(pieces):
    """Join pieces of the type they came in (tensor, str, list or tuple)."""
    first = pieces[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(pieces)
    if isinstance(first, str):
        return "".join(pieces)
    return type(first)(x for p in pieces for x in p)


def get_batch(data: torch.Tensor, block_size: int, batch_size: int, device=None,
              generator: torch.Generator | None = None,
              starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``batch_size`` random windows of ``block_size`` tokens and their next-token targets.

    Start offsets are uniform on [0, N - block_size - 1], drawn with ``generator`` (so a
    seeded generator gives the same batches every time) on the CPU. ``starts`` (a 1-D int
    tensor, e.g. from `document_starts`) restricts them to those offsets, drawn uniformly:
    every window then begins where a document begins, as a prompt does.
    """
    check_tensor("data", data, ndim=1, floating=False)
    check_int("block_size", block_size, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    if block_size >= len(data):
        raise ValueError(f"block_size ({block_size}) must be smaller than the data ({len(data)} tokens): "
                         "each window needs block_size + 1 tokens")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if starts is None:
        # The last window starts at N - T - 1, so its target still fits in the data.
        offsets = torch.randint(len(data) - block_size, (batch_size,), generator=generator)  # (B,)
    else:
        check_tensor("starts", starts, ndim=1, floating=False)
        try:  # offsets are drawn on the CPU, whatever device the starts came from
            starts = starts.to("cpu")
        except (RuntimeError, NotImplementedError) as e:  # e.g. a 'meta' tensor holds no values
            raise ValueError(f"starts must hold offsets readable on the CPU, got a tensor on {starts.device}: {e}") from None
        if len(starts) == 0:
            raise ValueError("starts must hold at least one offset")
        if int(starts.min()) < 0 or int(starts.max()) > len(data) - block_size - 1:
            raise ValueError(f"starts must lie in [0, {len(data) - block_size - 1}] (a window of block_size + 1 "
                             f"tokens must fit in the data), got [{int(starts.min())}, {int(starts.max())}]")
        offsets = starts[torch.randint(len(starts), (batch_size,), generator=generator)].long()  # (B,)
    idx = offsets[:, None] + torch.arange(block_size)  # (B, 1) + (T,) -> (B, T)
    data = data.to("cpu", torch.int64)
    x, y = data[idx], data[idx + 1]  # (B, T) each
    if device is not None:
        try:  # torch's errors for "gpu" or an absent CUDA do not say which argument was wrong
            x, y = x.to(device), y.to(device)
        except (RuntimeError, TypeError, ValueError) as e:
            raise ValueError(f"device {device!r} is not a usable device here (e.g. 'cpu', 'cuda'): {e}") from None
    return x, y
