"""Load OpenAI's GPT-2 weights, in Hugging Face's layout, into our own `GPT`.

Our `GPT` is GPT-2's architecture: learned positions, pre-LN blocks, LayerNorm eps 1e-5,
a final LayerNorm, a head tied to the token embedding, q, k and v stored as one matrix. One
thing differs in how GPT-2 *stores* it, and one in what it computes:

- GPT-2's projections are ``Conv1D`` modules: ``y = x @ W + b`` with W of shape (in, out),
  the transpose of `nn.Linear`'s (out, in). Every matrix is transposed on the way in.
- q, k and v are one fused projection ``c_attn`` of width 3C; ours is fused the same way
  (``self_attn.qkv_proj``, `helpers.fused_attention`), so it maps over whole, transposed.
- GPT-2's GELU is the tanh approximation: `GPTConfig(activation="gelu_tanh")`.

The map, per block i (C = d_model, F = d_ff)::

    h.i.ln_1.{weight,bias}       (C,)              -> blocks.i.norm1
    h.i.attn.c_attn.weight       (C, 3C)  T        -> blocks.i.self_attn.qkv_proj.weight (3C, C)
    h.i.attn.c_attn.bias         (3C,)             -> blocks.i.self_attn.qkv_proj.bias
    h.i.attn.c_proj.weight       (C, C)   T        -> blocks.i.self_attn.out_proj.weight
    h.i.ln_2.{weight,bias}       (C,)              -> blocks.i.norm2
    h.i.mlp.c_fc.weight          (C, F)   T        -> blocks.i.ff.linear1.weight (F, C)
    h.i.mlp.c_proj.weight        (F, C)   T        -> blocks.i.ff.linear2.weight (C, F)
    wte.weight (V, C) -> tok_emb.weight (and the tied head), wpe.weight (P, C) -> pos_emb.embedding.weight,
    ln_f -> ln_f.

A checkpoint's keys may carry a ``transformer.`` prefix (GPT2LMHeadModel) or not (the hub's
``model.safetensors``); the causal-mask buffers ``attn.bias`` / ``attn.masked_bias`` of old
checkpoints are not weights and are skipped; ``lm_head.weight``, if present, must equal
``wte.weight`` (GPT-2 ties them).

Shapes: ``convert_gpt2_state_dict(sd, cfg) -> {our name: tensor}``; ``load_gpt2(path) -> GPT``.

Example:
    >>> model = load_gpt2("gpt2/")            # doctest: +SKIP  (a folder from `make gpt2`)
    >>> count_parameters(model)               # doctest: +SKIP
    124439808
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import torch

from helpers.gpt import GPT, GPTConfig
from helpers.safetensors_io import read_safetensors
from helpers.untrusted import confined, load_json, read_text, torch_load

GPT2_SMALL = {"vocab_size": 50257, "block_size": 1024, "d_model": 768, "n_heads": 12, "n_layers": 12}
GPT2_SMALL_PARAMETERS = 124_439_808  # the count for GPT-2 small with its head tied to wte
HEAD_SIZE = 64  # every GPT-2 size (small ... xl) has 64-wide heads: n_heads = d_model // 64
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers some checkpoints also store
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
_SIZES = {"vocab_size": "vocab_size", "n_positions": "block_size", "n_embd": "d_model", "n_head": "n_heads",
          "n_layer": "n_layers"}  # config.json field -> ours
CONFIG_LIMIT = 1 << 20  # bytes: GPT-2's config.json is under 1 kB
_BLOCK_KEY = re.compile(r"h\.(\d{1,9})\.")  # ASCII digits only ("٣".isdigit() is True), and few of them


def gpt2_config(**overrides) -> GPTConfig:
    """GPT-2's architecture as a `GPTConfig`: GPT-2 small unless ``overrides`` say otherwise."""
    fields = {**GPT2_SMALL, "d_ff": None, "dropout": 0.0, "positional": "learned", "tie_weights": True,
              "bias": True, "activation": "gelu_tanh", **overrides}
    return GPTConfig(**fields)


def config_from_hf(hf: Mapping) -> GPTConfig:
    """Our `GPTConfig` from a Hugging Face GPT-2 ``config.json`` (as a dict)."""
    if not isinstance(hf, Mapping):
        raise TypeError(f"hf must be a dict (a parsed config.json), got {type(hf).__name__}")
    if hf.get("model_type", "gpt2") != "gpt2":  # (hf values are untrusted: compare, never call)
        raise ValueError(f"config model_type must be 'gpt2', got {hf.get('model_type')!r}")
    act = hf.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in _ACTIVATIONS:
        raise ValueError(f"config activation_function must be one of {sorted(_ACTIVATIONS)}, got {act!r}")
    if hf.get("layer_norm_epsilon", 1e-5) != 1e-5:
        raise ValueError(f"config layer_norm_epsilon must be 1e-05 (ours), got {hf['layer_norm_epsilon']}")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        if hf.get(flag):
            raise ValueError(f"config {flag}=True is not supported by our GPT")
    if not hf.get("scale_attn_weights", True):
        raise ValueError("config scale_attn_weights=False is not supported (we scale by 1/sqrt(head size))")
    sizes = {}
    for theirs, ours in (*_SIZES.items(), ("n_inner", "d_ff")):
        if theirs not in hf and theirs != "n_inner":
            raise ValueError(f"config lacks the GPT-2 field {theirs!r}")
        v = hf.get(theirs)
        if not (v is None and theirs == "n_inner") and (type(v) is not int or v < 1):
            raise ValueError(f"config field {theirs!r} must be an integer >= 1, got {v!r}"[:200])
        sizes[ours] = v
    tie = hf.get("tie_word_embeddings", True)
    if not isinstance(tie, bool):
        raise ValueError(f"config field 'tie_word_embeddings' must be true or false, got {tie!r}"[:200])
    try:
        return gpt2_config(**sizes, tie_weights=tie, activation=_ACTIVATIONS[act])
    except (TypeError, ValueError) as e:  # e.g. n_head does not divide n_embd
        raise ValueError(f"config fields do not make a GPT-2: {e}") from None


def _normalise_keys(sd: Mapping, source: str) -> dict[str, torch.Tensor]:
    out = {}
    for key, t in sd.items():
        if not isinstance(key, str):
            raise TypeError(f"{source}: state-dict keys must be str, got {type(key).__name__}")
        name = key.removeprefix("transformer.")
        if name.endswith(_BUFFERS):
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{source}: {key!r} must be a torch.Tensor, got {type(t).__name__}")
        if name in out:
            raise ValueError(f"{source}: {name!r} appears twice (with and without 'transformer.')")
        out[name] = t
    return out


def expected_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a GPT-2 checkpoint in Hugging Face layout holds for ``config``, with its shape."""
    V, P, C, F, L = config.vocab_size, config.block_size, config.d_model, config.d_ff, config.n_layers
    shapes = {"wte.weight": (V, C), "wpe.weight": (P, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for i in range(L):
        h = f"h.{i}."
        shapes.update({
            h + "ln_1.weight": (C,), h + "ln_1.bias": (C,),
            h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
            h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
            h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
            h + "mlp.c_fc.weight": (C, F), h + "mlp.c_fc.bias": (F,),
            h + "mlp.c_proj.weight": (F, C), h + "mlp.c_proj.bias": (C,),
        })
    if not config.tie_weights:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def _check_config(config: GPTConfig) -> GPTConfig:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
    if config.positional != "learned" or not config.bias:
        raise ValueError("a GPT-2 checkpoint needs positional='learned' and bias=True in the config")
    return config


def convert_gpt2_state_dict(sd: Mapping, config: GPTConfig, source: str = "state dict") -> dict[str, torch.Tensor]:
    """A GPT-2 state dict in Hugging Face layout -> our `GPT`'s state dict (same values, our names).

    Raises ValueError naming ``source`` and the key for a missing, unexpected or misshaped tensor.
    Works on the meta device (shapes only).
    """
    if not isinstance(sd, Mapping):
        raise TypeError(f"sd must be a dict of tensors, got {type(sd).__name__}")
    _check_config(config)
    sd = _normalise_keys(sd, source)
    if 12 * config.n_layers + 4 > len(sd) + 1:  # bound the work by the file before listing what it must hold
        raise ValueError(f"{source} holds {len(sd)} tensors, too few for n_layers={config.n_layers} "
                         "(GPT-2 stores 12 per block and 4 more): another config, or a damaged file")
    want = expected_shapes(config)
    if config.tie_weights and "lm_head.weight" in sd:
        want["lm_head.weight"] = want["wte.weight"]
    missing = [k for k in want if k not in sd]
    if missing:
        raise ValueError(f"{source} lacks {len(missing)} GPT-2 tensor(s), first {missing[0]!r} "
                         f"(expected shape {want[missing[0]]})")
    extra = sorted(k for k in sd if k not in want)
    if extra:
        raise ValueError(f"{source} has {len(extra)} unexpected tensor(s), first {extra[0]!r} "
                         f"(shape {tuple(sd[extra[0]].shape)}): not GPT-2 layout, or another config")
    for k, shape in want.items():
        if tuple(sd[k].shape) != shape:
            raise ValueError(f"{source}: {k!r} has shape {tuple(sd[k].shape)}, expected {shape} for this config")
    if config.tie_weights and "lm_head.weight" in sd and not sd["wte.weight"].is_meta:
        if not torch.equal(sd["lm_head.weight"], sd["wte.weight"]):
            raise ValueError(f"{source}: 'lm_head.weight' differs from 'wte.weight' but the config ties them")
    out = {"tok_emb.weight": sd["wte.weight"], "pos_emb.embedding.weight": sd["wpe.weight"],
           "ln_f.weight": sd["ln_f.weight"], "ln_f.bias": sd["ln_f.bias"],
           "head.weight": sd["wte.weight"] if config.tie_weights else sd["lm_head.weight"]}
    for i in range(config.n_layers):
        h, b = f"h.{i}.", f"blocks.{i}."
        out[b + "self_attn.qkv_proj.weight"] = sd[h + "attn.c_attn.weight"].t()  # (C, 3C) -> (3C, C), Conv1D -> Linear
        out[b + "self_attn.qkv_proj.bias"] = sd[h + "attn.c_attn.bias"]  # (3C,): q, k, v in the same order
        out[b + "self_attn.out_proj.weight"] = sd[h + "attn.c_proj.weight"].t()
        out[b + "self_attn.out_proj.bias"] = sd[h + "attn.c_proj.bias"]
        out[b + "ff.linear1.weight"] = sd[h + "mlp.c_fc.weight"].t()  # (C, F) -> (F, C)
        out[b + "ff.linear1.bias"] = sd[h + "mlp.c_fc.bias"]
        out[b + "ff.linear2.weight"] = sd[h + "mlp.c_proj.weight"].t()  # (F, C) -> (C, F)
        out[b + "ff.linear2.bias"] = sd[h + "mlp.c_proj.bias"]
        for ours, theirs in (("norm1", "ln_1"), ("norm2", "ln_2")):
            out[b + f"{ours}.weight"] = sd[h + f"{theirs}.weight"]
            out[b + f"{ours}.bias"] = sd[h + f"{theirs}.bias"]
    return {k: v.contiguous() for k, v in out.items()}


def config_from_state_dict(sd: Mapping) -> GPTConfig:
    """GPT-2's config read off the tensor shapes (n_heads = d_model // 64, as in every GPT-2 size)."""
    sd = _normalise_keys(sd, "state dict")
    try:
        (V, C), (P, _), (_, F) = sd["wte.weight"].shape, sd["wpe.weight"].shape, sd["h.0.mlp.c_fc.weight"].shape
    except (KeyError, ValueError):
        raise ValueError("the state dict lacks 'wte.weight', 'wpe.weight' or 'h.0.mlp.c_fc.weight' "
                         "(2-D): pass config= explicitly") from None
    blocks = {int(m.group(1)) for k in sd if (m := _BLOCK_KEY.match(k))}
    L = 1 + max(blocks, default=0)
    if len(blocks) != L:  # a name such as h.999999999.x must not make a billion-block model
        raise ValueError(f"the state dict names blocks up to h.{L - 1} but holds {len(blocks)} of them "
                         "(GPT-2 numbers its blocks 0, 1, 2, ...)")
    heads = C // HEAD_SIZE if C % HEAD_SIZE == 0 else 1
    return gpt2_config(vocab_size=V, block_size=P, d_model=C, n_heads=heads, n_layers=L, d_ff=F,
                       tie_weights="lm_head.weight" not in sd or torch.equal(sd["lm_head.weight"], sd["wte.weight"]))


def read_state_dict(path) -> dict[str, torch.Tensor]:
    """Tensors of a ``.safetensors`` or a ``.bin`` file (``torch.load(weights_only=True)``: no code runs).

    A ``.bin`` tensor must lie inside its own stored bytes: a view with a zero stride can claim
    a terabyte-sized shape over 4 bytes, and copying it would try to allocate all of it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no weights file at {path}")
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    if path.suffix not in (".bin", ".pt", ".pth"):
        raise ValueError(f"{path}: expected a .safetensors or .bin weights file, got suffix {path.suffix!r}")
    sd = torch_load(path, str(path), "PyTorch weights file")
    if not isinstance(sd, Mapping):
        raise ValueError(f"{path} does not hold a state dict (got {type(sd).__name__})")
    for key, t in sd.items():
        # torch.load already checks that a view stays inside its storage; a view may still repeat
        # bytes (stride 0), so its own size is bounded by the bytes stored, not by its shape.
        if isinstance(t, torch.Tensor) and t.numel() * t.element_size() > t.untyped_storage().nbytes():
            raise ValueError(f"{path}: tensor {key!r} claims shape {tuple(t.shape)} (strides {t.stride()}) over "
                             f"{t.untyped_storage().nbytes()} stored bytes: a damaged or hostile file")
    return dict(sd)


def hf_cache_folder(repo_id: str = "openai-community/gpt2", cache_dir=None) -> Path:
    """The snapshot folder of ``repo_id`` in the local Hugging Face cache (no network).

    ``cache_dir`` defaults to ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ~/.cache/huggingface/hub.
    """
    if not isinstance(repo_id, str) or not repo_id:
        raise TypeError(f"repo_id must be a non-empty str like 'openai-community/gpt2', got {repo_id!r}")
    if cache_dir is None:
        home = os.environ.get("HF_HOME", os.path.join(os.path.expanduser("~"), ".cache", "huggingface"))
        cache_dir = os.environ.get("HF_HUB_CACHE", os.path.join(home, "hub"))
    repo = Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
    return _snapshot(repo)


def _snapshot(repo: Path) -> Path:
    """The snapshot that ``refs/main`` names; a name read from a file must stay inside snapshots/."""
    snaps = repo / "snapshots"
    if not snaps.is_dir():
        raise FileNotFoundError(f"no Hugging Face cache of this model at {repo} (no snapshots/ folder)")
    ref = repo / "refs" / "main"
    if ref.is_file():
        name = read_text(ref, "Hugging Face ref file", limit=1024).strip()
        folder = confined(snaps, name, f"{ref} names the snapshot")
        if folder.is_dir():
            return folder
    found = sorted(p for p in snaps.iterdir() if p.is_dir() and p.resolve().is_relative_to(snaps.resolve()))
    if len(found) != 1:
        raise ValueError(f"{snaps} holds {len(found)} snapshots and no usable refs/main: pass the snapshot folder")
    return found[0]


def _in_repo(file: Path, repo: Path | None) -> Path:
    """A snapshot's files are links into the repo's blobs/; one that leads elsewhere is refused."""
    if repo is not None and not file.resolve().is_relative_to(repo.resolve()):
        raise ValueError(f"{file} leads outside the cache folder {repo} (a link to {file.resolve()}); refusing it")
    return file


def load_gpt2(path, config: GPTConfig | None = None) -> GPT:
    """Our `GPT` with GPT-2's weights, in eval mode.

    ``path``: a ``.safetensors`` / ``.bin`` file; a folder holding one (and, best, its
    ``config.json``), e.g. the one `make gpt2` fills; or a model folder of the Hugging Face
    cache (``.../hub/models--openai-community--gpt2``). ``config`` defaults to the folder's
    config.json, else to what the tensor shapes say.

    Files are untrusted (`helpers.untrusted`): the snapshot named by ``refs/main`` must be a
    folder inside ``snapshots/`` and the snapshot's files may only link inside the cache folder;
    the config is checked against the tensors the file really holds before anything is built.
    Errors are ValueError naming the file and the field.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a path, got {type(path).__name__}")
    path, repo = Path(path), None
    if path.is_dir():
        if (path / "snapshots").is_dir():
            repo, path = path, _snapshot(path)
        folder = path
        files = [path / f for f in WEIGHT_FILES if (path / f).is_file()]
        if not files:
            raise FileNotFoundError(f"{path} holds none of {', '.join(WEIGHT_FILES)}")
        path = _in_repo(files[0], repo)
    else:
        folder = path.parent
    sd = read_state_dict(path)
    if config is None:
        cfg_file = folder / "config.json"
        if cfg_file.is_file():
            hf = load_json(_in_repo(cfg_file, repo), "GPT-2 config.json", limit=CONFIG_LIMIT)
            try:
                config = config_from_hf(hf)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{cfg_file}: {e}") from None
        else:
            config = config_from_state_dict(sd)
    ours = convert_gpt2_state_dict(sd, config, source=str(path))
    model = GPT(config)
    model.load_state_dict(ours, strict=True)
    return model.eval()


def parameter_map(n_layers_shown: int = 1, config: GPTConfig | None = None) -> list[tuple[str, str, str]]:
    """(GPT-2 name, our name, what changes) for the first ``n_layers_shown`` blocks: for reading."""
    config = _check_config(config or gpt2_config())
    rows = [("wte.weight", "tok_emb.weight (= head.weight)", "as is"),
            ("wpe.weight", "pos_emb.embedding.weight", "as is")]
    for i in range(min(n_layers_shown, config.n_layers)):
        h, b = f"h.{i}.", f"blocks.{i}."
        rows += [(h + "ln_1.*", b + "norm1.*", "as is"),
                 (h + "attn.c_attn.weight", b + "self_attn.qkv_proj.weight", "transpose (q, k, v stay fused)"),
                 (h + "attn.c_attn.bias", b + "self_attn.qkv_proj.bias", "as is"),
                 (h + "attn.c_proj.weight", b + "self_attn.out_proj.weight", "transpose"),
                 (h + "ln_2.*", b + "norm2.*", "as is"),
                 (h + "mlp.c_fc.weight", b + "ff.linear1.weight", "transpose"),
                 (h + "mlp.c_proj.weight", b + "ff.linear2.weight", "transpose")]
    return rows + [("ln_f.*", "ln_f.*", "as is")]
