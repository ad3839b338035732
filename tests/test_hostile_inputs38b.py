"""Issue 38 items 9 and 10 (the rest): each hostile input gets a clear error naming what is wrong, or works."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from helpers.attention import scaled_dot_product_attention
from helpers.bpe import BPETokenizer
from helpers.checkpoint import load_checkpoint, save_checkpoint
from helpers.data import get_batch
from helpers.gpt import GPT, GPTConfig
from helpers.gpt2_tokenizer import GPT2Tokenizer, bytes_to_unicode
from helpers.smollm_tokenizer import SmolLMTokenizer
from helpers.tokenizers import CharTokenizer
from helpers.widgets.base import Panels


def test_a_bpe_pattern_that_is_not_a_regex_is_named():
    with pytest.raises(ValueError, match="pattern is not a valid regular expression"):
        BPETokenizer(pattern="(unclosed")


def test_decode_takes_a_list_of_0d_integer_tensors():
    tok = CharTokenizer.from_text("abc")
    assert tok.decode([torch.tensor(1), np.int64(2), torch.tensor([0])[0]]) == "bca"
    assert BPETokenizer(pattern=None).decode([torch.tensor(104), torch.tensor(105)]) == "hi"
    with pytest.raises(TypeError, match="ints only"):
        tok.decode([torch.tensor(1.0)])


def test_sdpa_takes_a_numpy_scale_and_refuses_a_bool():
    q = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(0))
    ours = scaled_dot_product_attention(q, q, q, scale=np.float32(0.5))[0]
    torch.testing.assert_close(ours, scaled_dot_product_attention(q, q, q, scale=0.5)[0])
    for bad in (True, "0.5", torch.tensor(0.5)):
        with pytest.raises(ValueError, match="scale must be"):
            scaled_dot_product_attention(q, q, q, scale=bad)


def _checkpoint(tmp_path):
    model = torch.nn.Linear(3, 3)
    path = tmp_path / "c.pt"
    save_checkpoint(path, model)
    return model, path


def test_a_checkpoint_with_a_sparse_tensor_is_called_damaged(tmp_path):
    model, path = _checkpoint(tmp_path)
    payload = torch.load(path, weights_only=True)
    payload["model"]["weight"] = payload["model"]["weight"].to_sparse()
    torch.save(payload, path)
    with pytest.raises(ValueError, match="non-dense"):
        load_checkpoint(path, model)


def test_a_checkpoint_path_that_is_a_pipe_or_folder_is_refused_without_reading(tmp_path):
    model, _ = _checkpoint(tmp_path)
    os.mkfifo(tmp_path / "pipe.pt")
    with pytest.raises(ValueError, match="not a regular file"):
        load_checkpoint(tmp_path / "pipe.pt", model)  # before: a hang risk, or "no checkpoint file"
    (tmp_path / "dir.pt").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        load_checkpoint(tmp_path / "dir.pt", model)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its permissions")
def test_an_unreadable_checkpoint_is_not_called_corrupt(tmp_path):
    model, path = _checkpoint(tmp_path)
    path.chmod(0)
    with pytest.raises(PermissionError):
        load_checkpoint(path, model)


def _gpt2_vocab(extra: dict[str, int]) -> dict[str, int]:
    vocab = {c: i for i, c in enumerate(bytes_to_unicode().values())}
    return {**vocab, **{t: len(vocab) + k for k, t in enumerate(extra)}}


def test_an_empty_token_in_a_vocabulary_is_refused():
    with pytest.raises(ValueError, match="empty string is not a token"):
        GPT2Tokenizer(_gpt2_vocab({"": 0}), [])
    tokens = [*bytes_to_unicode().values(), "", "<s>"]
    with pytest.raises(ValueError, match="empty string is not a token"):
        SmolLMTokenizer(tokens, [], len(tokens) - 1, len(tokens) - 1)


def test_allow_special_must_be_a_bool():
    gpt2 = GPT2Tokenizer(_gpt2_vocab({"<|endoftext|>": 0}), [])
    assert gpt2.encode("a<|endoftext|>", allow_special=True)[-1] == 256
    tokens = [*bytes_to_unicode().values(), "<s>"]
    smol = SmolLMTokenizer(tokens, [], 256, 256)
    for tok in (gpt2, smol):
        with pytest.raises(TypeError, match="allow_special must be a bool"):
            tok.encode("a", allow_special="no")


def test_forward_cached_with_no_new_token_is_named():
    model = GPT(GPTConfig(vocab_size=5, block_size=8, d_model=8, n_heads=2, n_layers=1)).eval()
    cache = model.new_cache(1)
    model.forward_cached(torch.tensor([[1, 2]]), cache)
    with pytest.raises(ValueError, match="at least one new token"):
        model.forward_cached(torch.zeros(1, 0, dtype=torch.long), cache)


def test_get_batch_reads_starts_from_another_device():
    data = torch.arange(100)
    x, _ = get_batch(data, 4, 3, generator=torch.Generator().manual_seed(0), starts=torch.tensor([10]))
    assert x[:, 0].tolist() == [10, 10, 10]
    with pytest.raises(ValueError, match="starts must hold offsets readable on the CPU"):
        get_batch(data, 4, 2, starts=torch.tensor([0, 5], device="meta"))


def test_panels_refuse_a_flat_list_and_show_before_any_draw():
    fig = Figure()
    a, b = fig.subplots(1, 2)
    with pytest.raises(ValueError, match="lists of axes"):
        Panels(fig, [a, b])
    with pytest.raises(ValueError, match="axes of this figure"):
        Panels(fig, [[a], [Figure().subplots()]])
    panels = Panels(fig, [[a], [b]])
    panels.show()  # never drawn: Panels draws it
    assert all(image.value for image in panels.images)
