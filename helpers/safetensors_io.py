"""Read a ``.safetensors`` file with nothing but the standard library and torch, as strictly as the format.

The format is short enough to read by hand, and reading it needs no code execution
(unlike a pickle)::

    8 bytes   N, the header length, unsigned little-endian
    N bytes   JSON: {name: {"dtype": "F32", "shape": [768, 2304], "data_offsets": [begin, end]},
                     "__metadata__": {str: str}}   (offsets count from the end of the header)
    the rest  every tensor's raw little-endian bytes, row-major

A file is untrusted input, and two readers must never see two different models in one file,
so this reader refuses what the reference library (``safetensors``) refuses: a header that
does not fit, JSON values of the wrong type (a float offset, a string shape), offsets that
overlap, leave gaps, or do not cover the data section exactly, a size that overflows. It is
stricter in one place: a name given twice is refused (the reference keeps one of them).
Every size is checked against the file before anything is allocated, and the file is
streamed, tensor by tensor, so memory is the data's size, never more.
tests/test_safetensors_fuzz.py checks it against the reference on mutated headers.

Shapes: ``read_safetensors(path) -> {name: tensor}``, each tensor of its stored shape and dtype.

Example:
    >>> tensors = read_safetensors("model.safetensors")   # doctest: +SKIP
    >>> tensors["wte.weight"].shape                        # doctest: +SKIP
    torch.Size([50257, 768])
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import torch

from helpers.untrusted import open_regular, parse_json

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U64": torch.uint64, "U32": torch.uint32, "U16": torch.uint16, "U8": torch.uint8, "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E4M3FNUZ": torch.float8_e4m3fnuz, "F8_E5M2": torch.float8_e5m2,
    "F8_E5M2FNUZ": torch.float8_e5m2fnuz, "C64": torch.complex64,
}
_MAX_HEADER = 100_000_000  # the reference implementation's limit: a larger header is a broken file
_USIZE = 2**64  # the reference reads sizes as 64-bit unsigned ints


def _entry(path: Path, name: str, info) -> tuple[torch.dtype, list[int], int, int]:
    """(dtype, shape, begin, end) of one header entry, each of the JSON type the format requires."""
    def bad(field: str, want: str, got) -> ValueError:
        return ValueError(f"{path}: tensor {name!r}: field {field!r} must be {want}, got {got!r}"[:400])

    def usize(v) -> bool:
        return type(v) is int and 0 <= v < _USIZE  # not a bool, not a float such as 8.0

    if not isinstance(info, dict):
        raise bad("(entry)", "an object with dtype, shape and data_offsets", info)
    for field in ("dtype", "shape", "data_offsets"):
        if field not in info:
            raise ValueError(f"{path}: tensor {name!r} lacks the field {field!r}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str):
        raise bad("dtype", "a string", dtype)
    if dtype not in DTYPES:
        raise bad("dtype", f"one of {', '.join(DTYPES)}", dtype)
    if not isinstance(shape, list) or not all(usize(d) and d < 2**63 for d in shape):  # torch sizes are int64
        raise bad("shape", "a list of integers in [0, 2**63)", shape)
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(usize(o) for o in offsets):
        raise bad("data_offsets", "two integers [begin, end] >= 0", offsets)
    return DTYPES[dtype], shape, offsets[0], offsets[1]


def read_header(path, f, size: int) -> tuple[int, dict]:
    """(N, header) of an open file of ``size`` bytes; the header is checked to fit before it is read."""
    if size < 8:
        raise ValueError(f"{path} is not a .safetensors file: {size} bytes, shorter than its header length")
    (n,) = struct.unpack("<Q", f.read(8))
    if n > _MAX_HEADER:
        raise ValueError(f"{path} is not a .safetensors file: its header length field says {n} bytes "
                         f"(at most {_MAX_HEADER} allowed)")
    if n > size - 8:
        raise ValueError(f"{path} is not a .safetensors file: its header length field says {n} bytes, "
                         f"but only {size - 8} follow it")
    try:
        text = f.read(n).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not a .safetensors file: header byte {e.start} is not UTF-8") from None
    header = parse_json(text, str(path), ".safetensors file (header)")
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a .safetensors file: its header is a JSON {type(header).__name__}, "
                         "not an object")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise ValueError(f"{path}: field '__metadata__' must be an object of strings (or null)")
    return n, header


def read_safetensors(path) -> dict[str, torch.Tensor]:
    """All tensors of a ``.safetensors`` file, on the CPU; ValueError names the file, the tensor and the field."""
    path = Path(path)
    if sys.byteorder != "little":  # the data is little-endian; a view of the bytes reads native order
        raise RuntimeError("reading .safetensors needs a little-endian machine")
    with open_regular(path, ".safetensors file") as f:
        size = os.fstat(f.fileno()).st_size
        n, header = read_header(path, f, size)
        entries = []
        for name, info in header.items():
            if name != "__metadata__":
                dtype, shape, begin, end = _entry(path, name, info)
                entries.append((begin, end, name, dtype, shape))
        entries.sort(key=lambda e: (e[0], e[1]))  # the reference sorts by offsets, too
        data_size, at = size - 8 - n, 0
        for begin, end, name, dtype, shape in entries:  # in file order: each starts where the last ended
            if begin != at or end < begin:
                where = "overlaps the one before it" if begin < at else "leaves a gap" if begin > at else "ends before it begins"
                raise ValueError(f"{path}: tensor {name!r} has data_offsets [{begin}, {end}]: it {where} "
                                 f"(the previous tensor ends at {at})")
            count = 1
            for d in shape:  # as the reference: no intermediate product may overflow 64 bits
                count *= d
                if count >= _USIZE:
                    break
            if count * dtype.itemsize * 8 >= _USIZE:
                raise ValueError(f"{path}: tensor {name!r} has shape {shape}: its size overflows 64 bits")
            if end - begin != count * dtype.itemsize:
                raise ValueError(f"{path}: tensor {name!r} ({dtype} {shape}) needs {count * dtype.itemsize} bytes, "
                                 f"but its data_offsets [{begin}, {end}] hold {end - begin}")
            at = end
        if at != data_size:
            raise ValueError(f"{path}: the tensors' data_offsets cover {at} bytes, but the data section holds "
                             f"{data_size}: the file is truncated, padded or damaged")
        out = {}
        for begin, end, name, dtype, shape in entries:  # every size is now known to fit the file
            buf = torch.empty(end - begin, dtype=torch.uint8)
            if end > begin and f.readinto(memoryview(buf.numpy())) != end - begin:
                raise ValueError(f"{path} ended while tensor {name!r} was read (changed while reading?)")
            out[name] = buf.view(dtype).view(shape)  # (bytes,) -> (count,) -> stored shape
    return out
