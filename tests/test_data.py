"""helpers.data: the embedded corpus, the split, and get_batch's shift, bounds and determinism."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.data import CORPORA, get_batch, load_corpus, train_val_split


def test_load_corpus_is_the_frozen_file_whatever_the_python():
    import hashlib
    import sys

    text = load_corpus()
    assert len(text) == 465_048 and text.count("\r") == 0
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == CORPORA["pydoc"][1]
    assert load_corpus("pydoc") == text
    if sys.version_info[:3] == (3, 11, 7):  # the file was made from this Python's module
        from pydoc_data.topics import topics

        assert text == "\n".join(topics[k] for k in sorted(topics))


def test_load_corpus_refuses_a_changed_file(tmp_path, monkeypatch):
    import helpers.data as data

    (tmp_path / "pydoc_topics.txt").write_text(load_corpus()[:-1] + "X", encoding="utf-8")
    monkeypatch.setattr(data, "DATA_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"corpus 'pydoc': data/pydoc_topics.txt has sha256 .* damaged"):
        data.load_corpus()
    (tmp_path / "pydoc_topics.txt").unlink()
    with pytest.raises(ValueError, match="cannot read pydoc_topics.txt"):
        data.load_corpus()
    with pytest.raises(TypeError, match="name must be a str"):
        data.load_corpus(1)


def test_load_corpus_unknown_name_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown corpus 'shakespeare'; valid names: pydoc"):
        load_corpus("shakespeare")


@pytest.mark.parametrize("data", [torch.arange(10), list(range(10)), "abcdefghij"])
def test_train_val_split_is_contiguous(data):
    train, val = train_val_split(data, 0.2)
    assert len(train) == 8 and len(val) == 2
    assert list(train) + list(val) == list(data)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 500), st.floats(0.01, 0.99))
def test_train_val_split_sizes(n, fraction):
    try:
        train, val = train_val_split(torch.arange(n), fraction)
    except ValueError as e:
        assert "empty" in str(e)
        assert round(n * fraction) in (0, n)
        return
    assert len(val) == round(n * fraction) and len(train) + len(val) == n
    assert torch.equal(torch.cat([train, val]), torch.arange(n))


@pytest.mark.parametrize("data, fraction, error", [
    (torch.arange(10), 0.0, ValueError), (torch.arange(10), 1.0, ValueError),
    (torch.arange(10), 0.01, ValueError), (torch.arange(10), "0.1", TypeError),
    (torch.zeros(2, 5), 0.1, ValueError), ({1, 2}, 0.1, TypeError),
])
def test_train_val_split_errors(data, fraction, error):
    with pytest.raises(error):
        train_val_split(data, fraction)


def test_get_batch_shapes_dtype_and_shift():
    data = torch.arange(100, 200, dtype=torch.int32)
    x, y = get_batch(data, block_size=5, batch_size=3, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (3, 5) and x.dtype == y.dtype == torch.int64
    assert torch.equal(y, x + 1)  # consecutive data: the next token is the id + 1
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_get_batch_windows_come_from_the_data():
    data = torch.randint(0, 50, (40,), generator=torch.Generator().manual_seed(1))
    x, y = get_batch(data, 7, 20, generator=torch.Generator().manual_seed(2))
    windows = data.unfold(0, 8, 1)  # every window of T + 1 tokens
    for xb, yb in zip(x, y, strict=True):
        row = torch.cat([xb, yb[-1:]])
        assert (windows == row).all(dim=1).any()


def test_get_batch_reaches_both_ends_and_never_beyond():
    data = torch.arange(6)
    x, y = get_batch(data, block_size=4, batch_size=200, generator=torch.Generator().manual_seed(0))
    assert set(x[:, 0].tolist()) == {0, 1}  # starts 0 and N - T - 1 = 1 both occur
    assert int(y.max()) == 5


def test_get_batch_is_deterministic_given_a_generator():
    data = torch.arange(1000)
    a = get_batch(data, 8, 4, generator=torch.Generator().manual_seed(123))
    b = get_batch(data, 8, 4, generator=torch.Generator().manual_seed(123))
    c = get_batch(data, 8, 4, generator=torch.Generator().manual_seed(124))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[0], c[0])


def test_get_batch_uses_the_global_seed_without_a_generator():
    data = torch.arange(1000)
    torch.manual_seed(5)
    a = get_batch(data, 8, 4)
    torch.manual_seed(5)
    assert torch.equal(a[0], get_batch(data, 8, 4)[0])


def test_get_batch_device():
    x, y = get_batch(torch.arange(20), 4, 2, device="cpu")
    assert x.device.type == y.device.type == "cpu"


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(data=torch.arange(10), block_size=10, batch_size=1), ValueError, "smaller than the data"),
    (dict(data=torch.arange(10), block_size=0, batch_size=1), ValueError, "block_size"),
    (dict(data=torch.arange(10), block_size=3, batch_size=0), ValueError, "batch_size"),
    (dict(data=torch.arange(10), block_size=3.0, batch_size=1), TypeError, "block_size"),
    (dict(data=torch.zeros(2, 10, dtype=torch.long), block_size=3, batch_size=1), ValueError, "1 dimensions"),
    (dict(data=torch.zeros(10), block_size=3, batch_size=1), TypeError, "integer token ids"),
    (dict(data=list(range(10)), block_size=3, batch_size=1), TypeError, "torch.Tensor"),
    (dict(data=torch.arange(10), block_size=3, batch_size=1, generator=0), TypeError, "generator"),
])
def test_get_batch_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        get_batch(**kwargs)


def test_docstring_example_runs():
    import doctest

    import helpers.data

    result = doctest.testmod(helpers.data)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("data", [torch.arange(1003), list(range(1003)), "".join(chr(65 + i % 26) for i in range(1003))])
@pytest.mark.parametrize("chunks", [2, 10, 37])
def test_train_val_split_in_chunks_partitions_the_data(data, chunks):
    train, val = train_val_split(data, 0.1, chunks=chunks)
    assert type(train) is type(data) and type(val) is type(data)
    assert abs(len(val) - 0.1 * len(data)) <= chunks  # each piece rounds on its own
    cuts = [len(data) * i // chunks for i in range(chunks + 1)]
    pieces = [train_val_split(data[a:b], 0.1) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]  # the default split of each piece
    assert list(train) == [x for p in pieces for x in p[0]]
    assert list(val) == [x for p in pieces for x in p[1]]
    assert sorted(list(train) + list(val)) == sorted(data)  # every item exactly once


def test_train_val_split_in_chunks_samples_the_whole_corpus():
    data = torch.arange(1000)
    _, val = train_val_split(data, 0.1, chunks=10)
    assert torch.equal(val, torch.cat([torch.arange(90, 100) + 100 * i for i in range(10)]))
    assert torch.equal(train_val_split(data, 0.1, chunks=1)[1], torch.arange(900, 1000))  # the default


@pytest.mark.parametrize("chunks, error", [(0, ValueError), (2000, ValueError), (2.0, TypeError), (True, TypeError)])
def test_train_val_split_chunks_errors(chunks, error):
    with pytest.raises(error, match="chunks"):
        train_val_split(torch.arange(1000), 0.1, chunks=chunks)


def test_songci_corpus_is_the_checked_text():
    import hashlib

    from helpers.data import split_documents

    text = load_corpus("songci")
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == CORPORA["songci"][1]
    assert len(text) == 2_059_792 and len(set(text)) == 6_099 and text.endswith("\n\n")
    train, val = split_documents(text, 0.1)
    assert train + val == text and val.count("\n\n") == 2105


def test_load_corpus_refuses_a_damaged_bz2(tmp_path, monkeypatch):
    import bz2

    import helpers.data as data

    (tmp_path / "songci.txt.bz2").write_bytes(b"BZh9 not really")
    monkeypatch.setattr(data, "DATA_DIR", tmp_path)
    with pytest.raises(ValueError, match="not a complete bz2 file"):
        data.load_corpus("songci")
    (tmp_path / "songci.txt.bz2").write_bytes(bz2.compress("浣溪沙\n".encode()))
    with pytest.raises(ValueError, match="has sha256 .* damaged"):
        data.load_corpus("songci")


def test_split_documents_keeps_whole_documents():
    from helpers.data import split_documents

    text = "a\nb\n\nc\n\nd\ne\n\nf\n\n"
    train, val = split_documents(text, 0.5)
    assert (train, val) == ("a\nb\n\nc\n\n", "d\ne\n\nf\n\n")
    assert split_documents("x\n\ny\n\nz", 0.34) == ("x\n\ny\n\n", "z\n\n")
    with pytest.raises(ValueError, match="leaves an empty"):
        split_documents("x\n\ny\n\n", 0.1)
    with pytest.raises(ValueError, match="val_fraction"):
        split_documents(text, 1.0)
    with pytest.raises(TypeError, match="text must be a str"):
        split_documents(b"x", 0.5)
    with pytest.raises(ValueError, match="sep must not be empty"):
        split_documents(text, 0.5, sep="")


def test_document_starts_open_each_window_like_a_tune_prompt():
    from helpers.ci_form import tune_prompt
    from helpers.data import document_starts

    text = "甲\n乙\n一二。\n\n浣溪沙\n晏殊\n一曲新词。\n\n菩萨蛮\n温\n小山。\n\n"
    starts = document_starts(text, block_size=4)
    # The first ci has no blank line in front of it; the last blank line has no ci after it.
    assert [text[s:s + 6] for s in starts.tolist()] == [tune_prompt("浣溪沙"), tune_prompt("菩萨蛮")]
    # A window of block_size + 1 characters must fit: a long block drops the late starts.
    assert document_starts(text, block_size=len(text) - starts[1].item() - 1).tolist() == starts.tolist()
    assert document_starts(text, block_size=len(text) - starts[1].item()).tolist() == starts[:1].tolist()
    with pytest.raises(ValueError, match="no document start"):
        document_starts("一首。\n\n", 2)
    with pytest.raises(TypeError, match="text must be a str"):
        document_starts(b"x", 2)
    with pytest.raises(ValueError, match="block_size"):
        document_starts(text, 0)


def test_get_batch_from_given_starts_draws_only_those_windows():
    data = torch.arange(100)
    starts = torch.tensor([3, 40, 77])
    x, y = get_batch(data, 8, 300, generator=torch.Generator().manual_seed(0), starts=starts)
    assert set(x[:, 0].tolist()) == {3, 40, 77}                 # every start is drawn, no other
    assert torch.equal(x, x[:, :1] + torch.arange(8)) and torch.equal(y, x + 1)
    for bad, message in [(torch.tensor([92]), r"starts must lie in \[0, 91\]"), (torch.tensor([-1]), "starts must lie"),
                         (torch.tensor([], dtype=torch.long), "at least one"), (torch.tensor([1.0]), "integer"),
                         (torch.tensor([True, False]), "integer")]:
        with pytest.raises((ValueError, TypeError), match=message):
            get_batch(data, 8, 2, starts=bad)
    with pytest.raises(TypeError, match="starts"):
        get_batch(data, 8, 2, starts=[3, 40])
