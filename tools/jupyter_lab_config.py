"""JupyterLab settings for the course, loaded by `make lab` (``jupyter lab --config=...``).

- Opening a notebook changes nothing, and a notebook saved after a session reopens without
  "Error displaying widget: model not found", showing each explorer's last picture: see
  tools/lab_hook.py (the contents manager below and the save hook).
- Chinese reads everywhere on a machine without a CJK font: the page loads tools/lab_custom/custom.css
  (``LabApp.custom_css``), which adds the course's font (helpers/fonts/course-cjk-sans.otf, served
  beside it) as the fallback of JupyterLab's interface, content and code fonts, widgets included.
"""

import os
import platform
import sys
from pathlib import Path

from jupyter_core.paths import jupyter_runtime_dir
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lab_hook  # noqa: E402

VERSION = platform.python_version()
PICTURES = lab_hook.pictures_folder(jupyter_runtime_dir())
os.environ[lab_hook.PICTURES_ENV] = str(PICTURES)  # kernels started by this server inherit it
c = get_config()  # noqa: F821  (defined by traitlets when it loads this file)


class CourseContentsManager(AsyncLargeFileManager):
    """Serves notebooks with this Python's ``language_info.version``; saves them as tools/lab_hook.py says."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):  # noqa: A002 (the API's name)
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if model.get("type") == "notebook":
            lab_hook.serve(model.get("content"), VERSION)
        return model

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Registered, not set as ``pre_save_hook``: setting that one twice (the server and JupyterLab both
        # load this file) printed an "Overriding existing pre_save_hook" warning at every start.
        self.register_pre_save_hook(_before_save)


def _before_save(model, **kwargs):
    if model.get("type") == "notebook":
        lab_hook.before_save(model.get("content"), PICTURES)


c.ServerApp.contents_manager_class = CourseContentsManager
c.LabApp.custom_css = True  # /custom/custom.css, found first in tools/lab_custom (tools/lab_custom_css.py)
c.ServerApp.jpserver_extensions.update({"lab_custom_css": True})

