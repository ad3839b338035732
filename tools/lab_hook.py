"""What `make lab`'s server does to a notebook it serves or saves (tools/jupyter_lab_config.py loads it).

Opening a notebook changes nothing, and a notebook saved after a session reopens without
"Error displaying widget: model not found":
- `serve`: JupyterLab writes the kernel's ``language_info`` into the notebook when it differs from
  the stored one, and the kernel's includes the exact Python version; the stored notebooks leave it
  out, so the server adds the running Python's version when it serves a notebook (the kernel is this
  same Python) and `before_save` removes it again.
- `before_save`, widget views: a view needs its model, which lives in the kernel; a reopened notebook
  has none unless the notebook saved the model's state (``metadata.widgets``). So every view whose
  model's state was not saved is dropped, whatever drew it (an explorer, tqdm's progress bar under
  ``tqdm.auto``, anything else), and the picture beside it in the output (every explorer's) shows
  instead; an output left with text only is removed too (a widget's text is its repr when first
  shown: tqdm's says "0%| | 0/300" after the bar reached 300). A view whose state was saved is kept:
  it renders from that state.
- `before_save`, pictures: an explorer writes its latest whole picture to ``PICTURES/<model id>.png``
  while the learner plays (helpers.widgets.keep, only under `make lab`); the saved output's picture
  is replaced by it, so a reopened notebook shows what the learner left, not the explorer's first state.
- ``"collapsed": true`` is added beside hidden outputs, as JupyterLab would.

Malformed metadata (``language_info: null``, a string ``kernelspec``) is left as it is: JupyterLab
opens such a notebook with a warning, and so must this server.
"""

from __future__ import annotations

import base64
import os
import re
import stat
import time
from pathlib import Path

from nbmeta import WIDGET_MIME, as_lab_leaves_it

STATE_MIME = "application/vnd.jupyter.widget-state+json"
PICTURES_ENV = "COURSE_EXPLORER_PICTURES"  # the folder; set by the server, inherited by its kernels
MAX_PICTURE_BYTES = 16 * 2**20  # a 4096 x 4096 RGBA picture compresses far below this
MODEL_ID = re.compile(r"[0-9a-f]{32}")  # ipywidgets' model ids (uuid4 hex); anything else is no file name
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _metadata(nb) -> dict | None:
    meta = nb.get("metadata") if isinstance(nb, dict) else None
    return meta if isinstance(meta, dict) else None


def python_notebook(nb) -> bool:
    """A notebook whose kernelspec names python3 (malformed metadata: False, and left alone)."""
    meta = _metadata(nb)
    spec = meta.get("kernelspec") if meta else None
    return isinstance(spec, dict) and spec.get("name") == "python3" and isinstance(nb.get("cells"), list)


def serve(nb, version: str) -> None:
    """Add the running Python's version to a python3 notebook's ``language_info`` (see the module doc)."""
    if python_notebook(nb) and isinstance(nb["metadata"].get("language_info"), dict):
        nb["metadata"]["language_info"]["version"] = version


def saved_widget_ids(nb) -> set[str]:
    """Model ids whose state the notebook saved (JupyterLab's "save widget state")."""
    widgets = (_metadata(nb) or {}).get("widgets")
    state = widgets.get(STATE_MIME) if isinstance(widgets, dict) else None
    models = state.get("state") if isinstance(state, dict) else None
    return set(models) if isinstance(models, dict) else set()


def read_picture(folder: Path | None, model_id: str) -> bytes | None:
    """The PNG an explorer left for ``model_id``, or None (no folder, no file, not a small regular PNG)."""
    if folder is None or not isinstance(model_id, str) or not MODEL_ID.fullmatch(model_id):
        return None
    path = folder / f"{model_id}.png"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_PICTURE_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_PICTURE_BYTES + 1)
    finally:
        os.close(fd)
    return data if data.startswith(PNG_MAGIC) and len(data) <= MAX_PICTURE_BYTES else None


def widgets_for_reopening(nb, pictures: Path | None = None) -> int:
    """Drop every widget view whose model's state is not saved, after putting the explorer's last
    picture (from ``pictures``) in its place; return how many views were dropped (see the module doc)."""
    saved, dropped = saved_widget_ids(nb), 0
    for cell in nb["cells"]:
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        if not isinstance(outputs, list):
            continue
        kept = []
        for out in outputs:
            data = out.get("data") if isinstance(out, dict) else None
            view = data.get(WIDGET_MIME) if isinstance(data, dict) else None
            if view is None:
                kept.append(out)
                continue
            model_id = view.get("model_id") if isinstance(view, dict) else None
            if "image/png" in data:
                last = read_picture(pictures, model_id)
                if last is not None:
                    data["image/png"] = base64.b64encode(last).decode("ascii")
            if model_id in saved:
                kept.append(out)
                continue
            del data[WIDGET_MIME]
            dropped += 1
            if set(data) - {"text/plain"}:  # a picture stays; a widget's text alone is its repr when first shown
                kept.append(out)
        outputs[:] = kept
    return dropped


def before_save(nb, pictures: Path | None = None) -> None:
    """Everything the server does to a python3 notebook it saves (see the module doc)."""
    if not python_notebook(nb):
        return
    info = nb["metadata"].get("language_info")
    if isinstance(info, dict):
        info.pop("version", None)
    widgets_for_reopening(nb, pictures)
    as_lab_leaves_it(nb)


def pictures_folder(runtime_dir: str | os.PathLike, max_age_s: float = 7 * 86400) -> Path:
    """The folder explorers leave their pictures in (only this user can read it); pictures older than
    ``max_age_s`` (sessions long gone) are removed."""
    folder = Path(runtime_dir) / "course-explorer-pictures"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    now = time.time()
    for old in folder.glob("*.png"):
        try:
            if now - old.lstat().st_mtime > max_age_s:
                old.unlink()
        except OSError:
            pass
    return folder
