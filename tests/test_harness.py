"""The notebook tools must catch what strict nbval cannot: missing or stale outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

import check_notebooks  # noqa: E402
import nbpercent  # noqa: E402
from nbmeta import META_KEY, code_fingerprint  # noqa: E402

SOURCE = """# %% [markdown]
# # Title
# Some *text*.

# %%
x = 1 + 1
x

# %% tags=["raises-exception"]
raise ValueError("expected")
"""


def _executed_notebook() -> nbformat.NotebookNode:
    """A notebook as tools/execute_notebooks.py leaves it (built by hand: no kernel needed)."""
    nb = nbpercent.to_nb(SOURCE)
    code = [c for c in nb.cells if c.cell_type == "code"]
    code[0].execution_count = 1
    code[0].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)]
    code[1].execution_count = 2
    code[1].outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="expected", traceback=[])]
    nb.metadata[META_KEY] = {"code_sha256": code_fingerprint(nb)}
    return nb


def _problems(nb, tmp_path: Path) -> list[str]:
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    return check_notebooks.problems(path)


def test_percent_round_trip():
    nb = nbpercent.to_nb(SOURCE)
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code"]
    assert nb.cells[0].source == "# Title\nSome *text*."
    assert nb.cells[2].metadata["tags"] == ["raises-exception"]
    again = nbpercent.to_nb(nbpercent.to_py(nb))
    assert [(c.cell_type, c.source) for c in again.cells] == [(c.cell_type, c.source) for c in nb.cells]


def test_percent_hidden_solution_round_trips():
    nb = nbpercent.to_nb('# %% hidden\nanswer = 42\n\n# %% tags=["raises-exception"] hidden\nraise ValueError("x")\n\n# %%\nanswer\n')
    assert [c.metadata.get("jupyter", {}).get("source_hidden", False) for c in nb.cells] == [True, True, False]
    assert nb.cells[1].metadata["tags"] == ["raises-exception"]
    assert nbpercent.to_nb(nbpercent.to_py(nb)).cells == nb.cells


def test_fresh_notebook_passes(tmp_path):
    assert _problems(_executed_notebook(), tmp_path) == []


def test_cleared_outputs_are_caught(tmp_path):
    nb = _executed_notebook()
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    assert any("execution counts" in p for p in _problems(nb, tmp_path))


def test_edited_code_is_caught(tmp_path):
    nb = _executed_notebook()
    nb.cells[1].source = "x = 1 + 2\nx"
    assert any("fingerprint" in p for p in _problems(nb, tmp_path))


def test_untagged_error_and_stderr_are_caught(tmp_path):
    nb = _executed_notebook()
    nb.cells[2].metadata["tags"] = []
    nb.metadata[META_KEY]["code_sha256"] = code_fingerprint(nb)
    nb.cells[1].outputs.append(nbformat.v4.new_output("stream", name="stderr", text="UserWarning: hm\n"))
    found = _problems(nb, tmp_path)
    assert any("stores an error" in p for p in found)
    assert any("stderr" in p for p in found)


def test_out_of_order_execution_is_caught(tmp_path):
    nb = _executed_notebook()
    nb.cells[1].execution_count = 3
    assert any("execution counts" in p for p in _problems(nb, tmp_path))


def test_empty_folder_fails(tmp_path):
    assert check_notebooks.main(["check", str(tmp_path)]) == 1


def test_widget_view_beside_a_picture_is_caught_and_the_executor_drops_it(tmp_path):
    import execute_notebooks

    nb = _executed_notebook()
    view = {"model_id": "abc", "version_major": 2, "version_minor": 0}
    data = {"text/plain": "Explorer()", "image/png": "iVBORw0KGgo=", execute_notebooks.WIDGET_MIME: view}
    nb.cells[1].outputs = [nbformat.v4.new_output("display_data", data=dict(data))]
    assert any("live-widget view" in p for p in _problems(nb, tmp_path))
    execute_notebooks.picture_instead_of_widget(nb)
    assert set(nb.cells[1].outputs[0].data) == {"text/plain", "image/png"}
    assert _problems(nb, tmp_path) == []
    lone = nbformat.v4.new_output("display_data", data={"text/plain": "VBox()", execute_notebooks.WIDGET_MIME: view})
    nb.cells[1].outputs = [lone]  # no picture to stand in: the live view stays
    execute_notebooks.picture_instead_of_widget(nb)
    assert execute_notebooks.WIDGET_MIME in nb.cells[1].outputs[0].data


def test_collapsed_cells_and_python_version_as_jupyterlab_leaves_them(tmp_path: Path):
    import nbmeta

    nb = _executed_notebook()
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.metadata["jupyter"] = {"outputs_hidden": True, "source_hidden": True}
    assert any('"collapsed": true' in p for p in _problems(nb, tmp_path))
    nbmeta.as_lab_leaves_it(nb)
    assert cell.metadata["collapsed"] is True and _problems(nb, tmp_path) == []
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
    assert any("Python version" in p for p in _problems(nb, tmp_path))
