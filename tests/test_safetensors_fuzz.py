"""Differential fuzz test: our .safetensors reader against the reference `safetensors` library.

Thousands of mutated files (seeded, so a failure reproduces) are given to both readers:
- what the reference refuses, we refuse with a ValueError that names the file;
- what the reference accepts, we load to the same names, dtypes, shapes and bytes;
- the one deliberate difference: a name given twice, which the reference accepts (keeping one),
  we refuse, naming the key.
"""

from __future__ import annotations

import json
import random
import struct
import time

import pytest
import torch

from helpers.safetensors_io import DTYPES, read_safetensors

st = pytest.importorskip("safetensors.torch")

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
         "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "C64": 8}
WEIRD = [None, True, False, -1, 1.0, 8.0, 1e3, "8", [], {}, [1], 2**64, 2**64 - 1, 2**63, -(2**63), "F32", 0.5]


def valid(rng: random.Random) -> tuple[dict, bytes]:
    """A correct header (as a dict) and its data section: 1-4 tensors, some of them empty."""
    header, data = {}, b""
    for i in range(rng.randint(1, 4)):
        dtype = rng.choice(sorted(SIZES))
        shape = [rng.choice([0, 1, 2, 3, 5]) for _ in range(rng.randint(0, 3))]
        count = 1
        for d in shape:
            count *= d
        nbytes = count * SIZES[dtype]
        # BOOL bytes 0/1 only: other bytes are undefined booleans (torch.equal may see 2 == 1)
        blob = bytes(rng.randint(0, 1) for _ in range(nbytes)) if dtype == "BOOL" else rng.randbytes(nbytes)
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + nbytes]}
        data += blob
    if rng.random() < 0.3:
        header["__metadata__"] = {"format": "pt"}
    items = list(header.items())
    rng.shuffle(items)  # JSON order is not file order
    return dict(items), data


def mutate(rng: random.Random, header: dict, data: bytes) -> tuple[bytes, bool]:
    """One file: a valid one with 0-2 mutations. Returns (bytes, whether a key was duplicated)."""
    names = [k for k in header if k != "__metadata__"]
    raw_suffix, pad, dup, n_override = b"", b"", False, None
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        kind = rng.randrange(14)
        name = rng.choice(names)
        entry = header[name]
        try:  # a mutation that no longer applies (an earlier one removed its field) is skipped
            if kind == 0:  # a field of the wrong JSON type or out of range
                field = rng.choice(["dtype", "shape", "data_offsets"])
                entry[field] = rng.choice(WEIRD)
            elif kind == 1:  # one offset moved
                j = rng.randrange(2)
                entry["data_offsets"][j] = max(0, entry["data_offsets"][j] + rng.choice([-3, -1, 1, 2, 8]))
            elif kind == 2:  # a wrong element type inside shape / offsets
                field = rng.choice(["shape", "data_offsets"])
                if entry[field]:
                    entry[field][rng.randrange(len(entry[field]))] = rng.choice(WEIRD)
            elif kind == 3:  # another dtype (valid, unknown, or lower case)
                entry["dtype"] = rng.choice([*SIZES, "f32", "F4", "I4", "Q8", "", "F8_E8M0"])
            elif kind == 4:  # another shape
                entry["shape"] = rng.choice([[], [0], [2, 0], [2**32, 2**32], [2**40, 2**40, 0], [2**63], [1, 1, 1, 1],
                                             [*entry["shape"], 1], entry["shape"][:-1]])
            elif kind == 5:  # data truncated or padded
                data = data[: rng.randrange(len(data) + 1)] if rng.random() < 0.5 else data + rng.randbytes(rng.randint(1, 9))
            elif kind == 6:  # header padded (the reference writer pads with spaces)
                pad = rng.choice([b" ", b"    ", b"\n", b"\t", b"\x00", b"x", b"\r\n"])
            elif kind == 7:  # a name given twice (raw JSON: a dict cannot hold it)
                dup = True
                raw_suffix = b', "%s": %s' % (name.encode(), json.dumps(entry).encode())
            elif kind == 8:  # metadata of the wrong kind
                header["__metadata__"] = rng.choice([None, {"a": 1}, {"a": "b"}, [], "x", {"a": None}, {}])
            elif kind == 9:  # a missing or extra field
                if rng.random() < 0.5:
                    entry.pop(rng.choice(["dtype", "shape", "data_offsets"]))
                else:
                    entry["extra"] = rng.choice([1, "x", None, [1, 2]])
            elif kind == 10:  # a wrong length field
                n_override = rng.choice([0, 1, 7, 2**63, 2**64 - 1, 100_000_001, -1, 1, 3])
            elif kind == 11:  # the entry itself of the wrong type
                header[name] = rng.choice(WEIRD)
            elif kind == 12:  # two tensors' offsets swapped (overlap or misorder)
                other = header[rng.choice(names)]
                if isinstance(other, dict) and "data_offsets" in other and "data_offsets" in entry:
                    entry["data_offsets"], other["data_offsets"] = other["data_offsets"], entry["data_offsets"]
            elif kind == 13:  # three offsets, or one
                entry["data_offsets"] = rng.choice([[0], [0, 0, 0], [0, 2**64]])
        except (KeyError, TypeError, IndexError, AttributeError):
            pass
    text = json.dumps(header).encode()
    if raw_suffix:
        text = text[:-1] + raw_suffix + b"}"
    text += pad
    n = len(text)
    if n_override is not None:
        n = n_override if n_override >= 0 else n + n_override
        n = min(n, 2**64 - 1)
    return struct.pack("<Q", n) + text + data, dup


def _file(header: bytes, data: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header + data


def _bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def reference(blob: bytes):
    try:
        return st.load(blob)
    except Exception as e:  # the reference raises SafetensorError, or KeyError for a dtype torch lacks
        return e


def test_dtypes_are_the_reference_torch_ones():
    assert set(DTYPES) >= set(SIZES)
    for name, dtype in DTYPES.items():
        assert st._getdtype(name) == dtype, name


def test_reader_agrees_with_the_reference_on_mutated_files(tmp_path):
    rng = random.Random(20231)
    path = tmp_path / "fuzz.safetensors"
    counts = {"both accept": 0, "both refuse": 0, "we refuse a duplicate": 0}
    start = time.perf_counter()
    for case in range(3000):
        header, data = valid(rng)
        blob, dup = mutate(rng, header, data)
        path.write_bytes(blob)
        ref = reference(blob)
        try:
            ours = read_safetensors(path)
        except ValueError as e:
            assert str(path) in str(e), f"case {case}: the error does not name the file: {e}"
            if isinstance(ref, Exception):
                counts["both refuse"] += 1
            else:
                assert dup and "twice" in str(e), f"case {case}: the reference accepts, we refuse: {e}\n{blob[:300]!r}"
                counts["we refuse a duplicate"] += 1
            continue
        assert not isinstance(ref, Exception), f"case {case}: the reference refuses ({ref}), we accept\n{blob[:300]!r}"
        assert sorted(ours) == sorted(ref), f"case {case}"
        for k, t in ref.items():
            assert ours[k].dtype == t.dtype and ours[k].shape == t.shape, f"case {case}: {k}"
            assert _bytes(ours[k]) == _bytes(t), f"case {case}: {k} bytes"
        counts["both accept"] += 1
    elapsed = time.perf_counter() - start
    print(f"fuzz: {counts} in {elapsed:.1f} s")
    # The generator must reach both outcomes often, or the test would prove little.
    assert counts["both accept"] > 400 and counts["both refuse"] > 1000 and counts["we refuse a duplicate"] > 20, counts


@pytest.mark.parametrize(("blob", "words"), [
    (struct.pack("<Q", 2**63) + b"{}", "header length"),
    (b"\x01\x02", "shorter than its header length"),
    (struct.pack("<Q", 2) + b"[]", "not an object"),
    (_file(b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0.0, 8]}}', bytes(8)), "data_offsets"),
    (_file(b'{"a": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}', bytes(8)), "shape"),
    (_file(b'{"a": {"dtype": "X", "shape": [2], "data_offsets": [0, 8]}}', bytes(8)), "dtype"),
])
def test_refusals_name_the_file_and_the_field(tmp_path, blob, words):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(blob)
    with pytest.raises(ValueError) as info:
        read_safetensors(path)
    assert str(path) in str(info.value) and words in str(info.value)
    assert isinstance(reference(blob), Exception)  # the reference refuses it too


def test_a_valid_file_written_by_the_reference_round_trips(tmp_path):
    tensors = {"w": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int16), "e": torch.zeros(0, 7),
               "h": torch.randn(2, 2).to(torch.bfloat16)}
    st.save_file(tensors, tmp_path / "m.safetensors", metadata={"format": "pt"})
    ours = read_safetensors(tmp_path / "m.safetensors")
    assert sorted(ours) == sorted(tensors)
    for k, t in tensors.items():
        assert ours[k].dtype == t.dtype and torch.equal(ours[k], t)
