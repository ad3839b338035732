"""Shared by the notebook tools and `make lab`: the fingerprint of a notebook's code, and the
notebook as JupyterLab would leave it, so that opening it changes nothing."""

from __future__ import annotations

import hashlib

META_KEY = "transformer_notebooks"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def code_fingerprint(nb) -> str:
    """SHA-256 over every code cell's source and tags, in order."""
    h = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = ",".join(sorted(cell.get("metadata", {}).get("tags", [])))
        h.update(cell.source.encode("utf-8") + b"\0" + tags.encode("utf-8") + b"\0")
    return h.hexdigest()


def as_lab_leaves_it(nb) -> None:
    """Add what JupyterLab 4 adds when it opens a notebook: ``"collapsed": true`` beside a code
    cell's ``jupyter.outputs_hidden`` (it marks the notebook modified otherwise). Works on
    nbformat nodes and on plain dicts (a contents-manager model)."""
    for cell in nb["cells"]:
        meta = cell.get("metadata", {})
        if cell.get("cell_type") == "code" and meta.get("jupyter", {}).get("outputs_hidden"):
            meta["collapsed"] = True


def picture_instead_of_widget(nb) -> int:
    """Drop the live-widget view from outputs that also carry a picture (every explorer's does);
    return how many were dropped.

    A stored widget view has no model behind it until the cell runs again, so JupyterLab would
    show "Error displaying widget: model not found" where the picture could be; GitHub and
    nbviewer would show the picture anyway. Running the cell brings the live widget back.
    nbval does not compare widget views, so the stored and fresh outputs still agree.
    """
    dropped = 0
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_MIME in data and "image/png" in data:
                del data[WIDGET_MIME]
                dropped += 1
    return dropped
