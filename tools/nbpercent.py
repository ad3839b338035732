"""Author notebooks as plain text: convert between `.ipynb` and the "percent" format.

    python tools/nbpercent.py to-py notebooks/03_positional_encoding.ipynb /tmp/03.py
    python tools/nbpercent.py to-nb /tmp/03.py notebooks/03_positional_encoding.ipynb

Percent format: a line `# %%` starts a code cell, `# %% [markdown]` a markdown cell
(each of its lines starts with `# `), `# %% tags=["raises-exception"]` a tagged
code cell, and a trailing ` hidden` (`# %% hidden`) a code cell that JupyterLab shows collapsed,
source and output (a reference solution). Outputs are not kept: re-execute with tools/execute_notebooks.py. Neither are markdown
attachments (06's architecture picture) nor cell ids (renumbered): to change a few cells of
such a notebook, edit it with nbformat instead.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat

from helpers.fileio import atomic_write

HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?: tags=(?P<tags>\[.*?\]))?(?P<hidden> hidden)?\s*$")


def to_nb(text: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    kind, tags, hidden, lines = None, [], False, []

    def flush() -> None:
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in body.split("\n"))
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell(body)
            if tags:
                cell.metadata["tags"] = tags
            if hidden:
                cell.metadata["jupyter"] = {"source_hidden": True, "outputs_hidden": True}
        cell["id"] = f"cell-{len(nb.cells):03d}"
        nb.cells.append(cell)

    for line in text.split("\n"):
        m = HEADER.match(line)
        if m:
            flush()
            kind = "markdown" if m.group("md") else "code"
            tags = json.loads(m.group("tags")) if m.group("tags") else []
            hidden, lines = bool(m.group("hidden")), []
        elif kind is not None:
            lines.append(line)
    flush()
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def to_py(nb) -> str:
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            body = "\n".join(("# " + ln) if ln else "#" for ln in cell.source.split("\n"))
            parts.append("# %% [markdown]\n" + body)
        else:
            tags = cell.metadata.get("tags", [])
            hidden = cell.metadata.get("jupyter", {}).get("source_hidden", False)
            head = "# %%" + (f" tags={json.dumps(tags)}" if tags else "") + (" hidden" if hidden else "")
            parts.append(head + "\n" + cell.source)
    return "\n\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] not in ("to-py", "to-nb"):
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = Path(argv[2]), Path(argv[3])
    with atomic_write(dst, "w", encoding="utf-8") as f:  # dst is often a tracked notebook: never half-written
        if argv[1] == "to-nb":
            nbformat.write(to_nb(src.read_text(encoding="utf-8")), f)
        else:
            f.write(to_py(nbformat.read(src, as_version=4)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
