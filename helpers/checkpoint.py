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
import io
import numbers
import pickle
import re
from pathlib import Path

import numpy as np
import torch
from torch import nn

from helpers.fileio import atomic_write, check_path
from helpers.fused_attention import fuse_legacy_qkv
from helpers.untrusted import open_regular, torch_load

FORMAT = "helpers-checkpoint/1"
_PLAIN = (bool, int, float, str, type(None), torch.Tensor)


def _check_plain(name: str, value):
    """Meta values must survive ``weights_only=True``: plain data, no objects.

    Returns the value converted to plain types: a numpy scalar (``np.mean(losses)``) or an
    int/float/str subclass (an Enum) becomes the int/float/str it stands for, a tuple/list/dict
    subclass the plain container, a dataclass a dict. Anything else raises TypeError naming it.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            k = _check_plain(f"{name} key {k!r}", k)
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(f"meta key {k!r} in {name} must be a str or int")
            out[k] = _check_plain(f"{name}[{k!r}]", v)
        return out
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        items = [_check_plain(f"{name}[{i}]", v) for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)  # a str subclass (e.g. a str Enum) -> its plain str value
    if value is None or isinstance(value, (torch.Tensor, torch.Size)):
        return value
    raise TypeError(
        f"meta value {name} is a {type(value).__name__}; store plain data (numbers, str, "
        "lists, dicts, tensors), e.g. dataclasses.asdict(config)"
    )


def save_checkpoint(path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, **meta) -> Path:
    """Write ``model``'s (and ``optimizer``'s) state and ``meta`` to ``path``; returns the path.

    ``meta`` holds plain data: numbers, str, None, tensors, and lists/tuples/dicts of them.
    Dataclasses become dicts, numpy scalars and Enum members the plain number or str they
    stand for. Save refuses (ValueError/TypeError) anything `load_checkpoint` would refuse,
    e.g. a class instance in ``meta`` or in a module's extra state: the file is read back
    with ``weights_only=True`` before it replaces ``path``. The write is atomic
    (`helpers.fileio.atomic_write`): a failed save leaves the old file intact and no temp file.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    meta = _check_plain("meta", meta)
    path = check_path("path", path)
    payload = {
        "format": FORMAT,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "optimizer_type": type(optimizer).__name__ if optimizer is not None else None,
        "meta": meta,
    }
    # Serialise and read back in memory first: a pickling error or what weights_only would
    # refuse surfaces before the file is touched, and disk errors stay plain OSErrors (torch
    # turns a failed write into an opaque "enforce fail" RuntimeError).
    buffer = io.BytesIO()
    try:
        torch.save(payload, buffer)
    except (pickle.PicklingError, TypeError, AttributeError) as e:  # e.g. a lambda in extra state
        raise ValueError(f"save_checkpoint refused to write {path}: the state cannot be pickled "
                         f"({type(e).__name__}: {e}); store plain data only") from None
    try:  # what load_checkpoint would refuse must not replace a good file
        _read(io.BytesIO(buffer.getvalue()), "the new file")
    except ValueError as e:
        reason = re.sub(r"^refused to load the new file: ", "", str(e))
        raise ValueError(f"save_checkpoint refused to write {path}: load_checkpoint could not read it back "
                         f"({reason}); store plain data only") from None
    with atomic_write(path, "wb") as f:
        f.write(buffer.getbuffer())
    return path


def _read(path, label: str | None = None) -> dict:
    """The payload of a checkpoint (a path, or a buffer named ``label``), read with weights_only=True."""
    label = str(path) if label is None else label
    if isinstance(path, Path):  # a regular file only (a FIFO would block); unreadable is said as such, not "corrupt"
        with open_regular(path, "checkpoint") as f:
            payload = torch_load(f, label, "checkpoint (torch.save file)")
    else:
        payload = torch_load(path, label, "checkpoint (torch.save file)")
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{label} is not a checkpoint written by save_checkpoint (no {FORMAT!r} marker)")
    return payload


def _check_state(saved: dict, model: nn.Module, path: Path) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(saved))
    unexpected = sorted(set(saved) - set(expected))
    shapes = [f"{k}: checkpoint {tuple(saved[k].shape)} vs model {tuple(expected[k].shape)}"
              for k in expected if k in saved and isinstance(saved[k], torch.Tensor)  # not extra state
              and isinstance(expected[k], torch.Tensor) and saved[k].shape != expected[k].shape]
    problems = []
    for label, items in (("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatches", shapes)):
        if items:
            more = f" (+{len(items) - 5} more)" if len(items) > 5 else ""
            problems.append(f"{label}: {', '.join(items[:5])}{more}")
    if problems:
        raise ValueError(f"{path} does not fit this model (was it built with another config?): " + "; ".join(problems))


def _check_fields(payload: dict, path: Path) -> None:
    """A file with the right marker can still be damaged: name the field that is wrong."""
    for key, kinds in (("model", dict), ("optimizer", (dict, type(None))), ("meta", dict),
                       ("optimizer_type", (str, type(None)))):
        if key != "optimizer_type" and key not in payload:
            raise ValueError(f"{path} is damaged: its field {key!r} is missing")
        if not isinstance(payload.get(key), kinds):
            raise ValueError(f"{path} is damaged: its field {key!r} is a {type(payload.get(key)).__name__}")
    bad = [k for k, v in payload["model"].items() if not isinstance(k, str)
           or not (isinstance(v, torch.Tensor) or k.endswith("_extra_state"))]  # extra state may be plain data
    if bad:
        raise ValueError(f"{path} is damaged: field 'model' has non-str key(s) or non-tensor value(s) at {bad[:3]}")
    sparse = [k for k, v in payload["model"].items() if isinstance(v, torch.Tensor) and v.layout != torch.strided]
    if sparse:  # save_checkpoint writes dense weights only; load_state_dict would fail deep inside torch
        raise ValueError(f"{path} is damaged: field 'model' holds non-dense (e.g. sparse) tensors at {sparse[:3]}; "
                         "a checkpoint's weights are dense")


def load_checkpoint(path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict:
    """Load weights into ``model`` (and state into ``optimizer``); returns the saved ``meta``.

    Raises:
        FileNotFoundError: no file at ``path``.
        TypeError: ``model`` / ``optimizer`` / ``path`` of the wrong kind.
        ValueError: the file is corrupt or truncated, carries pickled code, was not
            written by `save_checkpoint`, has a damaged field, or does not match the model /
            optimizer (including an optimizer of another class than the one saved).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    path = check_path("path", path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    payload = _read(path)  # a folder, pipe or device: ValueError from open_regular
    _check_fields(payload, path)
    saved_type = payload.get("optimizer_type")  # absent in files written before it was stored
    if optimizer is not None and saved_type is not None and saved_type != type(optimizer).__name__:
        raise ValueError(f"{path} holds the state of an optimizer of class {saved_type}, but the optimizer "
                         f"passed is {type(optimizer).__name__}")
    # a file saved before GPT stored q, k, v as one matrix: stacked, so it still loads
    payload["model"] = fuse_legacy_qkv(payload["model"], model.state_dict())
    _check_state(payload["model"], model, path)
    if optimizer is not None and payload["optimizer"] is None:
        raise ValueError(f"{path} holds no optimizer state, but an optimizer was passed")
    if optimizer is not None:
        try:
            optimizer.load_state_dict(payload["optimizer"])
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, RuntimeError) as e:  # damaged state
            raise ValueError(f"{path}: the optimizer state does not fit this optimizer: {e}") from None
    model.load_state_dict(payload["model"])
    return payload["meta"]
