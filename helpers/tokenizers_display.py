"""Tokens shown as coloured spans (notebook 01): which characters each token covers, at a glance.

The colours cycle through a fixed palette by position, so the HTML is the same on every run (strict
nbval compares it). A light background with black text stays readable in a dark theme too; a newline
is drawn as ``↵`` and a tab as ``→`` so that every token has a visible width.

Example:
    >>> TokenRows({"bytes": ["h", "i"]})
    bytes (2): h|i
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

PALETTE = ("#fde68a", "#bfdbfe", "#bbf7d0", "#fecaca", "#ddd6fe", "#fed7aa")


def _visible(piece: str) -> str:
    return piece.replace("\n", "↵").replace("\t", "→")


class TokenRows:
    """Rows of tokens, one row per tokenizer: ``{label: [token strings]}``, shown as coloured spans."""

    def __init__(self, rows: Mapping[str, Sequence[str]]):
        if not isinstance(rows, Mapping) or not rows:
            raise TypeError(f"rows must be a non-empty dict {{label: list of str}}, got {type(rows).__name__}")
        for label, pieces in rows.items():
            if not isinstance(label, str) or isinstance(pieces, str) or not all(isinstance(p, str) for p in pieces):
                raise TypeError(f"rows[{label!r}] must be a list of str under a str label")
        self.rows = {label: list(pieces) for label, pieces in rows.items()}

    def __repr__(self) -> str:
        return "\n".join(f"{label} ({len(p)}): {'|'.join(map(_visible, p))}" for label, p in self.rows.items())

    def _repr_html_(self) -> str:
        lines = []
        for label, pieces in self.rows.items():
            spans = "".join(
                f'<span style="background:{PALETTE[k % len(PALETTE)]};color:#000;white-space:pre">'
                f"{html.escape(_visible(p))}</span>" for k, p in enumerate(pieces))
            lines.append(f'<tr><td style="text-align:right;padding-right:8px">{html.escape(label)} '
                         f"({len(pieces)})</td><td style=\"text-align:left;font-family:monospace\">{spans}</td></tr>")
        return f"<table>{''.join(lines)}</table>"
