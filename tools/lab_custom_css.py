"""A server extension `make lab` enables (tools/jupyter_lab_config.py): JupyterLab's ``/custom/custom.css``
(loaded by every page when ``LabApp.custom_css`` is on) and the course's font beside it are served from
tools/lab_custom and helpers/fonts, ahead of the user's own ~/.jupyter/custom."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = [ROOT / "tools" / "lab_custom", ROOT / "helpers" / "fonts"]


def _jupyter_server_extension_points():
    return [{"module": "lab_custom_css"}]


def _load_jupyter_server_extension(serverapp):
    # The static handler reads this list on every request, so JupyterLab's /custom/ route finds ours first.
    paths = serverapp.web_app.settings["static_custom_path"]
    paths[:0] = [str(p) for p in FOLDERS if str(p) not in paths]
