"""What every explorer shares: how it shows itself in a notebook.

An explorer holds its controls and one `widgets.Image` in ``.widget``. Its display bundle
carries three views of the same state, and each front end picks the one it can render:
- the live widget (JupyterLab with a running kernel);
- ``image/png``, the current picture (GitHub, nbviewer, any reader without widgets), so a
  notebook needs no second, static copy of the plot above the explorer;
- a short ``text/plain`` (``repr``), which strict nbval compares; the widget's own would
  spell out the PNG bytes.
"""

from __future__ import annotations

import base64


class Explorer:
    """Mixin: subclasses set ``self.widget`` and ``self.image`` and define ``__repr__``."""

    def _repr_mimebundle_(self, **kwargs):
        show = getattr(self.widget, "_repr_mimebundle_", None)
        bundle = dict(show(**kwargs) or {}) if callable(show) else {}
        bundle["text/plain"] = repr(self)
        if self.image.value:
            bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        return bundle
