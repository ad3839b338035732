"""An explorer's last picture, left for `make lab`'s save hook, so a saved notebook reopens on what
the learner was looking at rather than on the explorer's first state.

The output an explorer leaves in a notebook holds the picture it had when it was displayed; the
browser never sends the later ones back. Under `make lab` the server names a folder in the
environment (``COURSE_EXPLORER_PICTURES``, inherited by its kernels); there, a displayed explorer
writes its whole picture as ``<widget model id>.png`` half a second after the learner stops moving
its controls, and tools/lab_hook.py puts it into the output on save. Elsewhere (nbval, tests, a
plain JupyterLab) nothing is written.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from helpers.fileio import atomic_write

ENV = "COURSE_EXPLORER_PICTURES"
DELAY_S = 0.5  # after the last redraw: a drag writes once, not once per step
MODEL_ID = re.compile(r"[0-9a-f]{32}")


def folder() -> Path | None:
    """The folder the server named, if it exists and is a folder; else None."""
    name = os.environ.get(ENV)
    path = Path(name) if name else None
    return path if path is not None and path.is_absolute() and path.is_dir() else None


class LastPicture:
    """``__call__(picture)`` after each redraw; writes ``picture.value`` (PNG bytes) once the redraws
    stop for `DELAY_S` (at once without a running event loop)."""

    def __init__(self, model_id: str, where: Path):
        if not isinstance(model_id, str) or not MODEL_ID.fullmatch(model_id):
            raise ValueError(f"model_id must be 32 lowercase hex digits, got {model_id!r}")
        self.path = where / f"{model_id}.png"
        self._picture = None
        self._pending: asyncio.TimerHandle | None = None

    def write(self) -> None:
        self._pending = None
        if self._picture is None:
            return
        try:
            with atomic_write(self.path) as f:
                f.write(self._picture.value)
        except OSError:
            pass  # the folder went away (the server stopped): the saved picture stays the displayed one

    def __call__(self, picture) -> None:
        self._picture = picture
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.write()
            return
        if self._pending is not None:
            self._pending.cancel()
        self._pending = loop.call_later(DELAY_S, self.write)


def keeper(widget) -> LastPicture | None:
    """A `LastPicture` for a displayed explorer's widget, or None where no folder was named."""
    where = folder()
    model_id = getattr(widget, "model_id", None)
    if where is None or not isinstance(model_id, str) or not MODEL_ID.fullmatch(model_id):
        return None
    return LastPicture(model_id, where)
