"""A GGUF file (llama.cpp's model format) read as untrusted bytes: metadata, tensors, dequantisation.

A GGUF file is one little-endian byte string::

    "GGUF"  version(u32)  n_tensors(u64)  n_kv(u64)
    n_kv x     key(string)  type(u32)  value          metadata: architecture, sizes, tokenizer ...
    n_tensors x name(string) n_dims(u32) dims(u64 x n_dims) ggml_type(u32) offset(u64)
    padding to `general.alignment` (32), then the tensors' bytes, each at data_start + offset

A string is its byte length (u64) and UTF-8 bytes; an array is an element type (u32), a count
(u64) and the elements. ``dims`` lists the fastest-varying dimension first, so a ggml weight
of dims (576, 1536) is a torch (1536, 576) matrix: (out, in), as `nn.Linear` stores it.

Quantised types store blocks of 32 numbers (`dequantize`):

- Q4_1: float16 scale d, float16 minimum m, 16 bytes of 4-bit codes q in 0..15 -> x = d·q + m
  (the low nibbles are numbers 0..15 of the block, the high nibbles 16..31): 20 bytes for 32
  numbers, 5 bits a number.
- Q8_0: float16 scale d, 32 signed bytes q -> x = d·q: 34 bytes for 32 numbers.

The file is untrusted (hostile-file discipline, as `helpers.untrusted`): at most ``limit``
bytes are read, once; its sha256 is checked against the pin before anything is parsed; every
count, length and offset is checked against the bytes that are there before it is used, so a
damaged file raises ValueError naming what is wrong instead of allocating gigabytes.

Example:
    >>> g = read_gguf(path, sha256=PIN)                       # doctest: +SKIP
    >>> g.metadata["llama.block_count"], dequantize(g.tensors["blk.0.attn_q.weight"]).shape  # doctest: +SKIP
    (30, torch.Size([576, 576]))
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import torch

from helpers.untrusted import read_bytes

MAGIC = b"GGUF"
MAX_BYTES = 256 << 20  # the shipped file is 98 MB
MAX_ITEMS = 1 << 20  # metadata entries, tensors, array elements: the shipped file's largest array has 49,152
MAX_DIMS = 4
# ggml type -> (name, numbers per block, bytes per block)
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 3: ("Q4_1", 32, 20), 8: ("Q8_0", 32, 34)}
# metadata value type -> struct format (8 = string, 9 = array are read apart)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


@dataclass(frozen=True)
class GGUFTensor:
    """One stored tensor: its name, ggml type name, torch shape (slowest dimension first) and raw bytes."""

    name: str
    type: str
    shape: tuple[int, ...]
    data: memoryview


@dataclass(frozen=True)
class GGUFFile:
    version: int
    metadata: dict
    tensors: dict[str, GGUFTensor]


class _Reader:
    """Reads values at a cursor; any read past the end is a ValueError that names the field."""

    def __init__(self, raw: bytes, source: str):
        self.raw, self.pos, self.source = memoryview(raw), 0, source

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.raw):
            raise ValueError(f"{self.source} is damaged: {what} needs {n} bytes at offset {self.pos}, "
                             f"the file has {len(self.raw) - self.pos} left")
        out = self.raw[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def count(self, what: str, item_bytes: int) -> int:
        n = self.scalar("<Q", what)
        if n > MAX_ITEMS or n * item_bytes > len(self.raw) - self.pos:
            raise ValueError(f"{self.source} is damaged: {what} = {n} does not fit the {len(self.raw) - self.pos} "
                             f"bytes left (at most {MAX_ITEMS} items are read)")
        return n

    def string(self, what: str) -> str:
        n = self.count(f"length of {what}", 1)
        try:
            return bytes(self.take(n, what)).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{self.source} is damaged: {what} is not UTF-8") from None

    def value(self, vtype: int, what: str, depth: int = 0):
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype], what)
        if vtype == 8:
            return self.string(what)
        if vtype == 9 and depth == 0:  # arrays of arrays are not used by llama files: refused
            etype = self.scalar("<I", f"element type of {what}")
            if etype not in _SCALARS and etype != 8:
                raise ValueError(f"{self.source} is damaged: {what} is an array of unknown type {etype}")
            size = struct.calcsize(_SCALARS[etype]) if etype in _SCALARS else 8  # a string takes >= 8 bytes
            n = self.count(f"length of {what}", size)
            return [self.value(etype, what, depth + 1) for _ in range(n)]
        raise ValueError(f"{self.source} is damaged: {what} has unknown value type {vtype}")


def read_gguf(path, sha256: str | None, *, limit: int = MAX_BYTES) -> GGUFFile:
    """Parse the GGUF file at ``path`` (at most ``limit`` bytes) whose sha256 must be ``sha256``.

    ``sha256=None`` skips the pin (tests of damaged files); the shipped model is always pinned.

    Raises:
        ValueError: the file is larger than ``limit``, its sha256 differs, or it is damaged.
        FileNotFoundError: no file at ``path``.
    """
    if sha256 is not None and (not isinstance(sha256, str) or len(sha256) != 64):
        raise TypeError(f"sha256 must be a 64-character hex str or None, got {sha256!r}")
    raw = read_bytes(path, "GGUF file", limit=limit)  # read once: the bytes hashed are the bytes parsed
    if sha256 is not None:
        digest = hashlib.sha256(raw).hexdigest()
        if digest != sha256.lower():
            raise ValueError(f"{path} has sha256 {digest[:12]}..., expected {sha256[:12]}...: it is not the pinned "
                             "model file (damaged or replaced); reinstall it with `make install`")
    return parse_gguf(raw, str(path))


def parse_gguf(raw: bytes, source: str = "GGUF bytes") -> GGUFFile:
    """Parse GGUF ``raw`` bytes (see the module docstring); every field is bounds-checked."""
    r = _Reader(raw, source)
    if bytes(r.take(4, "magic")) != MAGIC:
        raise ValueError(f"{source} is not a GGUF file (it does not start with b'GGUF')")
    version = r.scalar("<I", "version")
    if version not in (2, 3):
        raise ValueError(f"{source}: GGUF version {version} is not supported (2 or 3)")
    n_tensors = r.count("tensor count", 8 + 4 + 8 + 4 + 8)
    n_kv = r.count("metadata count", 8 + 4)
    metadata = {}
    for i in range(n_kv):
        key = r.string(f"metadata key {i}")
        if key in metadata:
            raise ValueError(f"{source} is damaged: metadata key {key!r} appears twice")
        metadata[key] = r.value(r.scalar("<I", f"type of {key!r}"), repr(key))
    infos = []
    for i in range(n_tensors):
        name = r.string(f"tensor name {i}")
        n_dims = r.scalar("<I", f"dimension count of {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise ValueError(f"{source} is damaged: tensor {name!r} has {n_dims} dimensions (1..{MAX_DIMS} allowed)")
        dims = [r.scalar("<Q", f"dimension of {name!r}") for _ in range(n_dims)]
        gtype = r.scalar("<I", f"type of {name!r}")
        offset = r.scalar("<Q", f"offset of {name!r}")
        infos.append((name, dims, gtype, offset))
    align = metadata.get("general.alignment", 32)
    if isinstance(align, bool) or not isinstance(align, int) or not 1 <= align <= 1 << 16 or align & (align - 1):
        raise ValueError(f"{source} is damaged: general.alignment must be a power of two up to 65536, got {align!r}")
    start = -(-r.pos // align) * align
    tensors, spans = {}, []
    for name, dims, gtype, offset in infos:
        if name in tensors:
            raise ValueError(f"{source} is damaged: tensor {name!r} appears twice")
        if gtype not in GGML_TYPES:
            raise ValueError(f"{source}: tensor {name!r} has ggml type {gtype}, which this reader does not "
                             f"dequantise (it reads {', '.join(t[0] for t in GGML_TYPES.values())})")
        tname, per_block, block_bytes = GGML_TYPES[gtype]
        numel = 1
        for d in dims:
            if not 1 <= d <= len(raw) * 8:
                raise ValueError(f"{source} is damaged: tensor {name!r} has dimension {d}")
            numel *= d
        if dims[0] % per_block:
            raise ValueError(f"{source} is damaged: tensor {name!r} ({tname}) has a row of {dims[0]} numbers, "
                             f"not a multiple of its block of {per_block}")
        nbytes = numel // per_block * block_bytes
        if offset % align or start + offset + nbytes > len(raw):
            raise ValueError(f"{source} is damaged: tensor {name!r} ({nbytes} bytes at offset {offset}) lies outside "
                             f"the file or off its {align}-byte alignment")
        spans.append((offset, offset + nbytes, name))
        tensors[name] = GGUFTensor(name, tname, tuple(reversed(dims)), r.raw[start + offset : start + offset + nbytes])
    spans.sort()
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:], strict=False):
        if begin < end:
            raise ValueError(f"{source} is damaged: tensors {a!r} and {b!r} overlap")
    return GGUFFile(version, metadata, tensors)


def dequantize(t: GGUFTensor) -> torch.Tensor:
    """The float32 numbers of a stored tensor, in its torch shape (see the module docstring for the formats)."""
    if not isinstance(t, GGUFTensor):
        raise TypeError(f"t must be a GGUFTensor, got {type(t).__name__}")
    raw = torch.frombuffer(bytearray(t.data), dtype=torch.uint8)  # a private copy: the file's bytes stay read-only
    if t.type == "F32":
        return raw.view(torch.float32).reshape(t.shape).clone()
    if t.type == "F16":
        return raw.view(torch.float16).float().reshape(t.shape)
    if t.type == "Q4_1":
        return dequantize_q4_1(raw.view(-1, 20)).reshape(t.shape)
    if t.type == "Q8_0":
        return dequantize_q8_0(raw.view(-1, 34)).reshape(t.shape)
    raise ValueError(f"t.type must be one of {[v[0] for v in GGML_TYPES.values()]}, got {t.type!r}")


def dequantize_q4_1(blocks: torch.Tensor) -> torch.Tensor:
    """Q4_1 blocks (N, 20) uint8 -> (N, 32) float32: x = d·q + m, float32 arithmetic as llama.cpp's."""
    d = blocks[:, 0:2].contiguous().view(torch.float16).float()  # (N, 20) -> (N, 1)
    m = blocks[:, 2:4].contiguous().view(torch.float16).float()  # (N, 1)
    qs = blocks[:, 4:20]  # (N, 16): byte j holds number j (low nibble) and number j + 16 (high nibble)
    q = torch.cat([qs & 0x0F, qs >> 4], dim=1).float()  # (N, 16) x 2 -> (N, 32)
    return d * q + m  # (N, 32)


def dequantize_q8_0(blocks: torch.Tensor) -> torch.Tensor:
    """Q8_0 blocks (N, 34) uint8 -> (N, 32) float32: x = d·q."""
    d = blocks[:, 0:2].contiguous().view(torch.float16).float()  # (N, 34) -> (N, 1)
    q = blocks[:, 2:34].contiguous().view(torch.int8).float()  # (N, 32)
    return d * q  # (N, 32)
