"""`make lab`'s server (tools/lab_hook.py, tools/jupyter_lab_config.py): what it serves and saves, and
the explorer's last picture it puts into a saved notebook (helpers/widgets/keep.py)."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.widgets import attention_explorer
from helpers.widgets import keep as keep_module

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import lab_hook  # noqa: E402

VIEW = "application/vnd.jupyter.widget-view+json"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
ID_A, ID_B, ID_C = "a" * 32, "b" * 32, "c" * 32


def _view(model_id):
    return {"model_id": model_id, "version_major": 2, "version_minor": 0}


def _notebook():
    explorer = {"output_type": "display_data", "metadata": {},
                "data": {"text/plain": "Explorer()", "image/png": "c3RvcmVk", VIEW: _view(ID_A)}}
    bar = {"output_type": "display_data", "metadata": {},  # tqdm.auto's bar under JupyterLab
           "data": {"text/plain": "100%|##########| 20/20 [00:01<00:00]", VIEW: _view(ID_B)}}
    lone = {"output_type": "display_data", "metadata": {}, "data": {VIEW: _view(ID_C)}}
    text = {"output_type": "stream", "name": "stdout", "text": "step 20\n"}
    return {"cells": [{"cell_type": "code", "metadata": {}, "source": "", "execution_count": 1,
                       "outputs": [explorer, bar, text, lone]}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                         "language_info": {"name": "python", "version": "3.11.7"}},
            "nbformat": 4, "nbformat_minor": 5}  # fmt: skip


def test_every_view_without_saved_state_is_dropped_what_stands_beside_it_stays():
    nb = _notebook()
    lab_hook.before_save(nb)
    outs = nb["cells"][0]["outputs"]
    # The explorer keeps its picture; the progress bar's text (its first state) and a lone view go.
    assert [sorted(o.get("data", {})) for o in outs] == [["image/png", "text/plain"], []]
    assert outs[1]["output_type"] == "stream" and "version" not in nb["metadata"]["language_info"]


def test_a_view_whose_state_the_notebook_saved_is_kept():
    nb = _notebook()
    nb["metadata"]["widgets"] = {lab_hook.STATE_MIME: {"state": {ID_B: {"model_name": "HBoxModel"}},
                                                       "version_major": 2, "version_minor": 0}}  # fmt: skip
    lab_hook.before_save(nb)
    outs = nb["cells"][0]["outputs"]
    assert VIEW not in outs[0]["data"] and outs[1]["data"][VIEW]["model_id"] == ID_B and len(outs) == 3
    assert outs[2]["output_type"] == "stream"


@pytest.mark.parametrize("meta", [
    {"kernelspec": "python3", "language_info": {"name": "python"}},
    {"kernelspec": {"name": "python3"}, "language_info": None},
    {"kernelspec": None}, {}, "not a dict",
])  # fmt: skip
def test_malformed_metadata_is_served_and_saved_as_it_is(meta):
    nb = _notebook()
    nb["metadata"] = copy.deepcopy(meta)
    lab_hook.serve(nb, "3.12.0")
    assert nb["metadata"] == meta
    lab_hook.before_save(nb)
    if not (isinstance(meta, dict) and isinstance(meta.get("kernelspec"), dict)):
        assert nb["metadata"] == meta and VIEW in nb["cells"][0]["outputs"][0]["data"]  # not ours: untouched


def test_serve_adds_the_version_and_save_removes_it():
    nb = _notebook()
    del nb["metadata"]["language_info"]["version"]
    lab_hook.serve(nb, "3.12.0")
    assert nb["metadata"]["language_info"]["version"] == "3.12.0"
    lab_hook.before_save(nb)
    assert nb["metadata"]["language_info"] == {"name": "python"}


def test_the_saved_picture_is_the_last_one_the_explorer_left(tmp_path):
    nb = _notebook()
    (tmp_path / f"{ID_A}.png").write_bytes(PNG)
    lab_hook.before_save(nb, tmp_path)
    assert base64.b64decode(nb["cells"][0]["outputs"][0]["data"]["image/png"]) == PNG


@pytest.mark.parametrize("bad", ["not a png", "link", "folder", "huge"])
def test_a_picture_file_that_is_not_a_small_png_is_ignored(tmp_path, bad):
    path = tmp_path / f"{ID_A}.png"
    if bad == "not a png":
        path.write_bytes(b"GIF89a" + b"\0" * 16)
    elif bad == "link":
        (tmp_path / "target.png").write_bytes(PNG)
        path.symlink_to(tmp_path / "target.png")
    elif bad == "folder":
        path.mkdir()
    else:
        path.write_bytes(PNG + b"\0" * lab_hook.MAX_PICTURE_BYTES)
    nb = _notebook()
    lab_hook.before_save(nb, tmp_path)
    assert nb["cells"][0]["outputs"][0]["data"]["image/png"] == "c3RvcmVk"
    assert lab_hook.read_picture(tmp_path, "../" + ID_A) is None


def test_a_displayed_explorer_leaves_its_last_picture_only_where_the_server_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(keep_module.ENV, raising=False)
    ex = attention_explorer()
    ex._repr_mimebundle_()
    assert ex.panels.keep is None  # nbval, tests, a plain JupyterLab: nothing written
    monkeypatch.setenv(keep_module.ENV, str(tmp_path))
    ex = attention_explorer()
    first = ex.image.value
    bundle = ex._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"]) == first
    ex.head.value = 1  # no event loop here: written at once
    last = (tmp_path / f"{ex.widget.model_id}.png").read_bytes()
    assert last == ex.image.value != first
    nb = _notebook()
    nb["cells"][0]["outputs"][0]["data"].update(bundle)
    lab_hook.before_save(nb, tmp_path)
    assert base64.b64decode(nb["cells"][0]["outputs"][0]["data"]["image/png"]) == last


def test_the_server_config_loads_and_serves_the_font_css(tmp_path):
    """The config file runs as JupyterLab runs it; the CSS it serves names the font file beside it."""
    code = ("from traitlets.config import Config; import runpy; c = Config();"
            f"ns = runpy.run_path({str(ROOT / 'tools' / 'jupyter_lab_config.py')!r}, {{'get_config': lambda: c}});"
            "import json, os; print(json.dumps([c.LabApp.custom_css, sorted(c.ServerApp.jpserver_extensions.to_dict()"
            "['update'] if hasattr(c.ServerApp.jpserver_extensions, 'to_dict') else c.ServerApp.jpserver_extensions),"
            f" os.environ[{lab_hook.PICTURES_ENV!r}]]))")  # fmt: skip
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    custom_css, extensions, pictures = json.loads(out.stdout.strip().splitlines()[-1])
    assert custom_css is True and "lab_custom_css" in extensions and Path(pictures).is_dir()
    import lab_custom_css

    css = (lab_custom_css.FOLDERS[0] / "custom.css").read_text()
    font = "course-cjk-sans.otf"
    assert f'url("{font}")' in css and (lab_custom_css.FOLDERS[1] / font).is_file()
    for var in ("--jp-ui-font-family", "--jp-content-font-family", "--jp-code-font-family-default"):
        assert f'{var}:' in css and '"Course CJK Sans"' in css.split(f"{var}:")[1].split(";")[0]
