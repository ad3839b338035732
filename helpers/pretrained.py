"""Pretrained models shipped in the repository's ``pretrained/`` folder, loaded offline and safely.

`load_pretrained("char_gpt")` returns ``(model, tokenizer)``: a character-level `GPT`
trained by ``make pretrain`` (``tools/pretrain.py``) on the training part of
``load_corpus("pydoc")`` split with ``train_val_split(..., 0.1, chunks=10)``.

A file is read once (at most `MAX_BYTES`), its sha256 checked against the one recorded here,
and those same bytes are then parsed with ``torch.load(weights_only=True)``, which refuses
pickled code (a file swapped between the check and the load cannot slip through). The
config it holds must fit the tensors it holds before a model is built. Weights are stored in
float16 (half the bytes) and come back as float32; the meta data records the loss
measured after that round trip.

Shapes: the model maps ids (B, T ≤ block_size) to logits (B, T, V).

Example:
    >>> model, tok = load_pretrained("char_gpt")                      # doctest: +SKIP
    >>> tok.decode(model.generate(torch.tensor([tok.encode("def ")]), 40)[0].tolist())  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from pathlib import Path

import torch

from helpers.fileio import atomic_write, check_path
from helpers.models import GPT, GPTConfig
from helpers.tokenizers import CharTokenizer
from helpers.untrusted import read_bytes, torch_load

PRETRAINED_DIR = Path(__file__).resolve().parent.parent / "pretrained"
FORMAT = "helpers-pretrained/1"
MAX_BYTES = 512 << 20  # a shipped model is a few MB; a larger file is refused before it is read
# name -> (file in pretrained/, sha256 of its bytes); tools/pretrain.py prints the new hash.
PRETRAINED = {
    "char_gpt": ("char_gpt.pt", "cef42fd36ea1c81ae54e75100c2349230df7a1f6e74b7c16c47ee6b8e7ae11b2"),
    # Song ci (notebook 08): `make pretrain-zh`; trained on load_corpus("songci") split by whole ci.
    "char_gpt_zh": ("char_gpt_zh.pt", "54453e864048d2348840dcf2126204de01a80c55a7732926b24686e1a50489d4"),
}


def save_pretrained(path, model: GPT, tokenizer: CharTokenizer, **meta) -> str:
    """Write ``model`` (float16 weights), its config, the tokenizer and plain ``meta``; returns the sha256.

    The write is atomic (`helpers.fileio.atomic_write`): an interrupted save leaves the old file.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    if not isinstance(tokenizer, CharTokenizer):
        raise TypeError(f"tokenizer must be a CharTokenizer, got {type(tokenizer).__name__}")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.vocab_size} characters, the model {model.config.vocab_size}")
    # A tied head is the embedding table under a second name: converted to float16 the two would
    # become two tensors and be stored twice (1.6 MB more for V = 6,099), so the head is left out
    # and re-tied when read.
    state = {k: v.detach().to("cpu", torch.float16) if v.is_floating_point() else v.detach().cpu()
             for k, v in model.state_dict().items() if not (model.config.tie_weights and k == "head.weight")}
    payload = {"format": FORMAT, "config": dataclasses.asdict(model.config), "chars": list(tokenizer.chars),
               "state": state, "meta": meta}
    path = check_path("path", path)
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    with atomic_write(path, "wb") as f:
        f.write(buffer.getbuffer())
    return hashlib.sha256(buffer.getbuffer()).hexdigest()


def read_pretrained(path, sha256: str | None = None) -> tuple[GPT, CharTokenizer, dict]:
    """Read a file written by `save_pretrained`: ``(model in eval mode, tokenizer, meta)``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no pretrained file at {path} (run `make pretrain` to create it)")
    raw = read_bytes(path, "pretrained file", limit=MAX_BYTES)  # read once: the bytes hashed are the bytes loaded
    digest = hashlib.sha256(raw).hexdigest()
    if sha256 is not None and digest != sha256:
        raise ValueError(f"{path} has sha256 {digest[:12]}..., expected {sha256[:12]}...; "
                         "the file was changed or damaged (restore it with git checkout pretrained/, "
                         "or run `make pretrain` and record the new hash in helpers/pretrained.py)")
    payload = torch_load(raw, str(path), "pretrained file")
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path} was not written by save_pretrained (no {FORMAT!r} marker)")
    config, state = _fields(path, payload)
    model = GPT(config)
    try:
        state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
        if config.tie_weights and "head.weight" not in state and "tok_emb.weight" in state:
            state["head.weight"] = state["tok_emb.weight"]  # saved once (see save_pretrained)
        model.load_state_dict(state)
    except RuntimeError as e:
        raise ValueError(f"{path} is damaged: field 'state' does not fit its config ({str(e)[:300]})") from None
    try:
        tokenizer = CharTokenizer(payload.get("chars"))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path} is damaged: field 'chars': {e}") from None
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"{path} is damaged: field 'chars' holds {tokenizer.vocab_size} characters, the config "
                         f"{config.vocab_size}")
    return model.eval(), tokenizer, payload.get("meta")


def _fields(path: Path, payload: dict) -> tuple[GPTConfig, dict]:
    """The config and the state of a payload, checked to fit each other before any model is built."""
    cfg, state = payload.get("config"), payload.get("state")
    names = {f.name for f in dataclasses.fields(GPTConfig)}
    if not isinstance(cfg, dict) or not set(cfg) <= names:
        raise ValueError(f"{path} is damaged: field 'config' must be a dict of GPTConfig fields")
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise ValueError(f"{path} is damaged: field 'state' must be a dict of tensors")
    if not isinstance(payload.get("meta"), dict):
        raise ValueError(f"{path} is damaged: field 'meta' must be a dict")
    try:
        config = GPTConfig(**cfg)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path} is damaged: field 'config': {e}") from None
    # A config of a billion layers must not be built from a file of a few kB: the model's size
    # must be that of the tensors stored (shapes are checked again by load_state_dict).
    # Count what is stored, not what the shapes claim: a tensor expanded with stride 0 has a
    # shape of billions over a few bytes, and would become that many floats when converted.
    for k, v in state.items():
        if v.layout != torch.strided:
            raise ValueError(f"{path} is damaged: tensor {k!r} is {v.layout}, not a dense tensor")
        if v.numel() * v.element_size() > v.untyped_storage().nbytes():
            raise ValueError(f"{path} is damaged: tensor {k!r} claims shape {tuple(v.shape)} (strides {v.stride()}) "
                             f"over {v.untyped_storage().nbytes()} stored bytes")
    storages = {v.untyped_storage().data_ptr(): v.untyped_storage().nbytes() for v in state.values()}
    claimed = sum(v.numel() * v.element_size() for v in state.values())
    if claimed > sum(storages.values()):  # many names over one storage: the same bytes counted again and again
        raise ValueError(f"{path} is damaged: its tensors claim {claimed} bytes over {sum(storages.values())} stored")
    stored = sum(v.numel() for v in state.values() if v.is_floating_point())
    C, F, L, V = config.d_model, config.d_ff, config.n_layers, config.vocab_size
    needed = V * C + L * (4 * C * C + 2 * C * F)  # a lower bound: embedding, attention and feed-forward matrices
    if needed > stored:
        raise ValueError(f"{path} is damaged: its config needs {needed} weights, but the file stores {stored}")
    return config, state


def load_pretrained(name: str = "char_gpt", with_meta: bool = False):
    """``(model, tokenizer)`` of a shipped model (``with_meta=True`` adds its training record).

    Raises:
        ValueError: unknown ``name``; the file's sha256 differs (damaged or replaced).
        FileNotFoundError: the file is missing.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name not in PRETRAINED and name != "smollm2":
        raise ValueError(f"unknown pretrained model {name!r}; valid names: {', '.join(PRETRAINED)}, smollm2")
    if not isinstance(with_meta, bool):
        raise TypeError(f"with_meta must be a bool, got {type(with_meta).__name__}")
    if name == "smollm2":  # SmolLM2-135M-Instruct, a GGUF file from a pinned wheel (helpers/smollm.py)
        from helpers.smollm import SHA256, load_smollm2, smollm2_path

        model, tok = load_smollm2()
        return (model, tok, {"file": str(smollm2_path()), "sha256": SHA256}) if with_meta else (model, tok)
    filename, sha256 = PRETRAINED[name]
    model, tok, meta = read_pretrained(PRETRAINED_DIR / filename, sha256)
    return (model, tok, meta) if with_meta else (model, tok)
