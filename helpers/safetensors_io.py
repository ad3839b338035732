"""Read a ``.safetensors`` file with nothing but the standard library and torch.

The format is short enough to read by hand, and reading it needs no code execution
(unlike a pickle)::

    8 bytes   N, the header length, unsigned little-endian
    N bytes   JSON: {name: {"dtype": "F32", "shape": [768, 2304], "data_offsets": [begin, end]},
                     "__metadata__": {...}}   (offsets count from the end of the header)
    the rest  every tensor's raw little-endian bytes, row-major

Shapes: ``read_safetensors(path) -> {name: tensor}``, each tensor of its stored shape and dtype.

Example:
    >>> tensors = read_safetensors("model.safetensors")   # doctest: +SKIP
    >>> tensors["wte.weight"].shape                        # doctest: +SKIP
    torch.Size([50257, 768])
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
_MAX_HEADER = 100_000_000  # the reference implementation's limit: a larger header is a broken file


def read_safetensors(path) -> dict[str, torch.Tensor]:
    """All tensors of a ``.safetensors`` file, on the CPU; ValueError names the file and the entry."""
    path = Path(path)
    if sys.byteorder != "little":  # the data is little-endian; torch.frombuffer reads native order
        raise RuntimeError("reading .safetensors needs a little-endian machine")
    raw = bytearray(path.read_bytes())  # writable, so torch.frombuffer shares it without a warning
    if len(raw) < 8:
        raise ValueError(f"{path} is not a .safetensors file: {len(raw)} bytes, shorter than its header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > min(_MAX_HEADER, len(raw) - 8):
        raise ValueError(f"{path} is not a .safetensors file: header length {n} does not fit in the file")
    try:
        header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not a .safetensors file: its header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a .safetensors file: its header is not a JSON object")
    start, size = 8 + n, len(raw) - 8 - n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = DTYPES[info["dtype"]]
            shape = [int(d) for d in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: entry {name!r} has a malformed header {info!r}") from None
        count = math.prod(shape)
        if not 0 <= begin <= end <= size or end - begin != count * dtype.itemsize:
            raise ValueError(f"{path}: tensor {name!r} ({info['dtype']} {shape}) has bad data offsets "
                             f"[{begin}, {end}] for a data section of {size} bytes")
        flat = torch.frombuffer(raw, dtype=dtype, count=count, offset=start + begin) if count else torch.empty(0, dtype=dtype)
        out[name] = flat.view(shape)  # (count,) -> stored shape
    return out
