"""Save and load model (and optimizer) state safely, with errors that say what is wrong.

A checkpoint is a ``torch.save``d dict of tensors and plain Python values only. It is
read with ``torch.load(weights_only=True)``, whose restricted unpickler refuses to
import anything: a file carrying pickled code (a ``__reduce__`` that calls a function)
is rejected before any of that code runs. Plain ``torch.load`` or ``pickle.load`` would
run it: never use them on files you did not write.

Shapes: a checkpoint holds ``model.state_dict()`` unchanged, so every tensor keeps its
shape, e.g. ``token_emb.weight`` (V, C).

Example:
    >>> save_checkpoint("checkpoints/gpt.pt", model, optimizer, step=2000)  # doctest: +SKIP
    >>> load_checkpoint("checkpoints/gpt.pt", model, optimizer)["step"]     # doctest: +SKIP
    2000
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import warnings
from pathlib import Path

import torch
from torch import nn

FORMAT = "helpers-checkpoint/1"
_PLAIN = (bool, int, float, str, type(None), torch.Tensor)


def _check_plain(name: str, value) -> None:
    """Meta values must survive ``weights_only=True``: plain data, no objects."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"meta key {k!r} in {name} must be a str or int")
            _check_plain(f"{name}[{k!r}]", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_plain(f"{name}[{i}]", v)
    elif not isinstance(value, _PLAIN):
        raise TypeError(
            f"meta value {name} is a {type(value).__name__}; store plain data (numbers, str, "
            "lists, dicts, tensors), e.g. dataclasses.asdict(config)"
        )


def save_checkpoint(path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, **meta) -> Path:
    """Write ``model``'s (and ``optimizer``'s) state and ``meta`` to ``path``; returns the path.

    Dataclass values in ``meta`` (e.g. a model config) are stored as dicts. The file is
    written to a temporary name first, so an interrupted save never leaves a half file.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    meta = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else v
            for k, v in meta.items()}
    _check_plain("meta", meta)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "meta": meta,
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def _unpickler_reason(message: str) -> str:
    """The useful line of torch's long weights_only error, e.g. 'Unsupported global: GLOBAL io.open'."""
    m = re.search(r"Unsupported (global: GLOBAL [\w.]+|operand \d+)", message)
    return m.group(0) if m else message.strip().splitlines()[0]


def _read(path: Path) -> dict:
    try:
        with warnings.catch_warnings():
            # A foreign pickle protocol only earns a warning before the file is refused or read.
            warnings.simplefilter("ignore", UserWarning)
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        reason = _unpickler_reason(str(e))
        if "global" in reason.lower():
            raise ValueError(
                f"refused to load {path}: it carries pickled code or objects ({reason}), which "
                "weights_only=True does not allow; nothing in it was run"
            ) from None
        raise ValueError(
            f"refused to load {path}: it is corrupt or not a torch.save file ({reason}); nothing in it was run"
        ) from None
    except Exception as e:  # torch raises RuntimeError, EOFError, IndexError... for damaged files
        detail = (str(e).strip().splitlines() or [""])[0]
        raise ValueError(
            f"{path} is not a readable checkpoint (corrupt or truncated): {type(e).__name__}: {detail}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path} is not a checkpoint written by save_checkpoint (no {FORMAT!r} marker)")
    return payload


def _check_state(saved: dict, model: nn.Module, path: Path) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(saved))
    unexpected = sorted(set(saved) - set(expected))
    shapes = [f"{k}: checkpoint {tuple(saved[k].shape)} vs model {tuple(expected[k].shape)}"
              for k in expected if k in saved and saved[k].shape != expected[k].shape]
    problems = []
    for label, items in (("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatches", shapes)):
        if items:
            more = f" (+{len(items) - 5} more)" if len(items) > 5 else ""
            problems.append(f"{label}: {', '.join(items[:5])}{more}")
    if problems:
        raise ValueError(f"{path} does not fit this model (was it built with another config?): " + "; ".join(problems))


def load_checkpoint(path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict:
    """Load weights into ``model`` (and state into ``optimizer``); returns the saved ``meta``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is corrupt or truncated, carries pickled code, was not
            written by `save_checkpoint`, or does not match the model / optimizer.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    payload = _read(path)
    _check_state(payload["model"], model, path)
    if optimizer is not None and payload["optimizer"] is None:
        raise ValueError(f"{path} holds no optimizer state, but an optimizer was passed")
    if optimizer is not None:
        try:
            optimizer.load_state_dict(payload["optimizer"])
        except (ValueError, KeyError) as e:
            raise ValueError(f"{path}: the optimizer state does not fit this optimizer: {e}") from None
    model.load_state_dict(payload["model"])
    return payload["meta"]
