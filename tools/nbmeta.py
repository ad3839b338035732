"""Shared by the notebook tools: the fingerprint of a notebook's code."""

from __future__ import annotations

import hashlib

META_KEY = "transformer_notebooks"


def code_fingerprint(nb) -> str:
    """SHA-256 over every code cell's source and tags, in order."""
    h = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = ",".join(sorted(cell.get("metadata", {}).get("tags", [])))
        h.update(cell.source.encode("utf-8") + b"\0" + tags.encode("utf-8") + b"\0")
    return h.hexdigest()
