"""JupyterLab settings for the course, loaded by `make lab` (``jupyter lab --config=...``).

Opening a notebook must change nothing (git stays clean, no "Save your work?" on closing), and
a notebook saved after a session must reopen without "Error displaying widget: model not found":
- JupyterLab writes the kernel's ``language_info`` into the notebook when it differs from the
  stored one, and the kernel's includes the exact Python version (3.11.7 here, 3.13.1 on another
  laptop). The stored notebooks leave the version out; this server adds the running Python's
  version when it serves a notebook (the kernel is this same Python) and removes it again on save.
- On save, a widget view that sits beside a picture (every explorer's output) is dropped, as
  tools/execute_notebooks.py does: on reopening the picture shows, and running the cell brings the
  live explorer back. ``"collapsed": true`` is added beside hidden outputs, as JupyterLab would.
"""

import platform
import sys
from pathlib import Path

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nbmeta import as_lab_leaves_it, picture_instead_of_widget  # noqa: E402

VERSION = platform.python_version()
c = get_config()  # noqa: F821  (defined by traitlets when it loads this file)


def _python_notebook(content) -> bool:
    return isinstance(content, dict) and content.get("metadata", {}).get("kernelspec", {}).get("name") == "python3"


class CourseContentsManager(AsyncLargeFileManager):
    """Serves notebooks with this Python's ``language_info.version`` (see the module doc)."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):  # noqa: A002 (the API's name)
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        nb = model.get("content") if model.get("type") == "notebook" else None
        if _python_notebook(nb) and "language_info" in nb["metadata"]:
            nb["metadata"]["language_info"]["version"] = VERSION
        return model


def pre_save(model, **kwargs):
    nb = model.get("content") if model.get("type") == "notebook" else None
    if _python_notebook(nb):
        nb["metadata"].get("language_info", {}).pop("version", None)
        picture_instead_of_widget(nb)
        as_lab_leaves_it(nb)


c.ServerApp.contents_manager_class = CourseContentsManager
c.ContentsManager.pre_save_hook = pre_save
