"""helpers.gguf_reader: a GGUF file is untrusted bytes; damaged ones raise ValueError naming the fault."""

import struct

import numpy as np
import pytest
import torch

from helpers.gguf_reader import dequantize, parse_gguf, read_gguf
from helpers.smollm import SHA256, SIZE, smollm2_path


def s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(tensors, kv=None, n_tensors=None, n_kv=None, version=3):
    """A small GGUF: ``tensors`` = [(name, dims, ggml_type, data bytes)], laid out at 32-byte alignment."""
    kv = (("general.architecture", 8, s("llama")),) if kv is None else kv
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kv) if n_kv is None else n_kv)
    for key, vtype, value in kv:
        head += s(key) + struct.pack("<I", vtype) + value
    data, infos = b"", b""
    for name, dims, gtype, raw in tensors:
        infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", gtype, len(data))
        data += raw + b"\0" * (-len(raw) % 32)
    head += infos
    return head + b"\0" * (-len(head) % 32) + data


def q4_1_block(d, m, codes):
    lo, hi = np.array(codes[:16], np.uint8), np.array(codes[16:], np.uint8)
    return np.array([d, m], np.float16).tobytes() + (lo | (hi << 4)).tobytes()


def test_q4_1_and_q8_0_by_hand():
    codes = list(range(16)) + list(range(15, -1, -1))
    raw = q4_1_block(0.5, -1.0, codes) + q4_1_block(2.0, 0.25, [3] * 32)
    q8 = np.array([0.25], np.float16).tobytes() + np.arange(-16, 16, dtype=np.int8).tobytes()
    f = parse_gguf(gguf([("w", [32, 2], 3, raw), ("e", [32], 8, q8), ("n", [2], 0, np.array([1.5, -2], np.float32).tobytes())]))
    w = dequantize(f.tensors["w"])
    assert w.shape == (2, 32)
    assert w[0].tolist() == [0.5 * c - 1.0 for c in codes] and w[1].tolist() == [6.25] * 32
    assert dequantize(f.tensors["e"]).tolist() == [0.25 * k for k in range(-16, 16)]
    assert dequantize(f.tensors["n"]).tolist() == [1.5, -2.0]
    assert f.metadata == {"general.architecture": "llama"}


@pytest.mark.parametrize("raw, match", [
    (b"GGML" + b"\0" * 40, "not a GGUF"),
    (gguf([], version=7), "version 7"),
    (gguf([], n_kv=1 << 40), "metadata count"),
    (gguf([], n_tensors=5), "tensor count"),
    (gguf([], kv=(("k", 8, struct.pack("<Q", 1 << 33)),)), "length of 'k'"),
    (gguf([], kv=(("k", 9, struct.pack("<IQ", 4, 1 << 30)),)), "length of 'k'"),
    (gguf([], kv=(("k", 42, b""),)), "unknown value type"),
    (gguf([], kv=(("k", 4, struct.pack("<I", 1)), ("k", 4, struct.pack("<I", 2)))), "twice"),
    (gguf([("w", [32], 2, b"\0" * 18)]), "ggml type 2"),
    (gguf([("w", [30], 3, b"\0" * 20)]), "multiple of its block"),
    (gguf([("w", [32, 100], 3, b"\0" * 20)]), "outside"),
    (gguf([("w", [32, 1 << 40], 3, b"\0" * 20)]), "dimension"),
    (gguf([("w", [32, 0], 3, b"")]), "dimension 0"),
    (gguf([("w", [32], 3, b"\0" * 20)] * 2), "twice"),
    (gguf([("w", [32], 3, b"\0" * 20)])[:-25], "outside"),
    (gguf([], kv=(("general.alignment", 4, struct.pack("<I", 3)),)), "alignment"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_damaged_files_are_refused(raw, match):
    with pytest.raises(ValueError, match=match):
        parse_gguf(raw, "x.gguf")


def test_overlapping_tensors_are_refused():
    raw = bytearray(gguf([("a", [32], 3, b"\0" * 20), ("b", [32], 3, b"\0" * 20)]))
    at = raw.index(b"b" + struct.pack("<I", 1)) + 1 + 4 + 8 + 4  # b's offset field
    raw[at : at + 8] = struct.pack("<Q", 0)
    with pytest.raises(ValueError, match="overlap"):
        parse_gguf(bytes(raw))


def test_truncated_anywhere_is_a_value_error():
    raw = gguf([("w", [32, 2], 3, q4_1_block(1, 0, [1] * 32) * 2)])
    end = len(raw.rstrip(b"\0"))  # the last tensor's last byte (the padding after it may go)
    for n in [*range(0, end, 7), end - 1]:
        with pytest.raises(ValueError):
            parse_gguf(raw[:n])


def test_pin_and_size_limit(tmp_path):
    p = tmp_path / "other.gguf"
    p.write_bytes(gguf([]))
    with pytest.raises(ValueError, match="not the pinned model file"):
        read_gguf(p, SHA256)
    with pytest.raises(ValueError, match="more than"):
        read_gguf(p, None, limit=10)
    with pytest.raises(TypeError, match="sha256"):
        read_gguf(p, "abc")
    assert read_gguf(p, None).tensors == {}


def test_shipped_file_dequantises_as_gguf_py():
    """Every tensor of the shipped file equals the `gguf` package's dequantisation, bit for bit."""
    gguf_py = pytest.importorskip("gguf")
    f = read_gguf(smollm2_path(), SHA256, limit=SIZE)
    ref = gguf_py.GGUFReader(smollm2_path())
    assert len(ref.tensors) == len(f.tensors) == 272
    for t in ref.tensors:
        ours = dequantize(f.tensors[t.name])
        theirs = torch.from_numpy(gguf_py.quants.dequantize(t.data, t.tensor_type).reshape(ours.shape))
        assert torch.equal(ours, theirs), t.name
