import ipywidgets as widgets
import numpy as np
import pytest
import torch

from helpers.positional import sinusoidal_table
from helpers.widgets import pe_explorer


def walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)


@pytest.fixture(scope="module")
def small():
    return dict(seq_len=16, d_model=8, base=100.0, dim=2, position=5)


def test_widget_tree_holds_the_controls_and_the_image():
    ex = pe_explorer()
    tree = list(walk(ex.widget))
    assert isinstance(ex.widget, widgets.VBox)
    sliders = [w for w in tree if isinstance(w, (widgets.IntSlider, widgets.FloatLogSlider))]
    assert {s.description for s in sliders} == {
        "seq_len",
        "d_model",
        "base",
        "dimension",
        "position m",
    }
    assert all(s.continuous_update for s in sliders)  # live while dragging; Throttle keeps it smooth
    assert ex.controls["d_model"].step == 2
    assert isinstance(ex.controls["base"], widgets.FloatLogSlider)
    images = [w for w in tree if isinstance(w, widgets.Image)]
    assert images == ex.panels.images and len(images) == 3  # table | curves | dot products
    assert all(i.format == "png" and i.value[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert sum(int(i.width) for i in images) == int(ex.image.width) == 800
    assert all(int(i.height) <= int(ex.image.height) for i in images)
    assert ex.image.value[:8] == b"\x89PNG\r\n\x1a\n"
    assert not any(isinstance(w, widgets.Output) for w in tree)  # Output widgets break strict nbval


def test_default_data_is_the_table_and_its_dot_products():
    ex = pe_explorer()
    torch.testing.assert_close(ex.table, sinusoidal_table(64, 128))
    assert sorted(ex.curves) == [10, 11]
    np.testing.assert_allclose(ex.curves[10], ex.table[:, 10].double().numpy())
    theta = 10000.0 ** (-np.arange(0, 128, 2) / 128)
    closed = np.cos(np.outer(ex.offsets, theta)).sum(axis=1)
    np.testing.assert_allclose(ex.dots, closed, atol=1e-5)
    assert ex.offsets[0] == -32 and ex.dots[32] == pytest.approx(64, abs=1e-5)


def test_repr_is_short_and_deterministic(small):
    a, b = pe_explorer(**small), pe_explorer(**small)
    bundle = a._repr_mimebundle_()
    assert bundle["text/plain"] == "PEExplorer(seq_len=16, d_model=8, base=100, dim=2, position=5)"
    assert bundle["text/plain"] == b._repr_mimebundle_()["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert a.image.value == b.image.value  # same state, same PNG bytes


@pytest.mark.parametrize(
    "name, value, changed",
    [
        ("seq_len", 24, "table"),
        ("d_model", 12, "table"),
        ("base", 1000.0, "table"),
        ("dim", 5, "curves"),
        ("position", 9, "dots"),
    ],
)
def test_each_control_changes_the_plotted_data_and_png(small, name, value, changed):
    ex = pe_explorer(**small)
    before_data = {"table": ex.table.clone(), "curves": dict(ex.curves), "dots": ex.dots.copy()}
    before_png = ex.image.value
    ex.controls[name].value = value
    after = getattr(ex, changed)
    if changed == "curves":
        assert sorted(after) == [4, 5] and sorted(before_data["curves"]) == [2, 3]
    elif changed == "table":
        assert after.shape != before_data["table"].shape or not torch.equal(
            after, before_data["table"]
        )
    else:
        assert not np.array_equal(after, before_data["dots"])
    assert ex.image.value != before_png
    # Whatever moved, the plotted data is that of the controls' current values.
    c = {k: w.value for k, w in ex.controls.items()}
    torch.testing.assert_close(ex.table, sinusoidal_table(c["seq_len"], c["d_model"], c["base"]))
    line_y = ex._lines[0].get_ydata()
    np.testing.assert_allclose(line_y, ex.table[:, c["dim"] - c["dim"] % 2].double().numpy())
    np.testing.assert_allclose(ex._dots.get_ydata(), ex.dots)


def test_shrinking_clamps_the_pickers_with_one_redraw(small, monkeypatch):
    ex = pe_explorer(**{**small, "dim": 7, "position": 15})
    calls = []
    original = ex.update
    monkeypatch.setattr(ex, "update", lambda: (calls.append(1), original()))
    ex.controls["d_model"].value = 4
    assert ex.controls["dim"].value == 3 and ex.controls["dim"].max == 3
    assert sorted(ex.curves) == [2, 3] and ex.table.shape == (16, 4)
    ex.controls["seq_len"].value = 6
    assert ex.controls["position"].value == 5 and ex.table.shape == (6, 4)
    assert ex.offsets.tolist() == [-5, -4, -3, -2, -1, 0]
    assert len(calls) == 2


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"d_model": 7}, ValueError, "even"),
        ({"d_model": 0}, ValueError, "d_model"),
        ({"seq_len": 1}, ValueError, "seq_len"),
        ({"seq_len": 10_000}, ValueError, "seq_len"),
        ({"base": 0.5}, ValueError, "base"),
        ({"base": "big"}, TypeError, "base"),
        ({"dim": 128}, ValueError, "dim"),
        ({"position": 64}, ValueError, "position"),
        ({"position": 1.0}, TypeError, "position"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        pe_explorer(**kwargs)


def test_defaults_fit_small_sizes_and_docstrings_run():
    import doctest

    import helpers.positional
    import helpers.widgets.pe

    ex = pe_explorer(seq_len=6, d_model=4)
    assert ex.controls["dim"].value == 2 and ex.controls["position"].value == 3
    for module in (helpers.positional, helpers.widgets.pe):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_static_still_is_the_widget_image():
    # Notebook 03 shows `explorer.figure` as the still for code-hosting sites: it must be
    # exactly what the live widget shows (moved here from the notebook: a CI concern).
    import io

    import matplotlib.image
    import numpy as np

    from helpers.plots import figure_to_png

    ex = pe_explorer()
    still, live = (matplotlib.image.imread(io.BytesIO(png), format="png")
                   for png in (figure_to_png(ex.figure), bytes(ex.image.value)))  # fmt: skip
    assert np.array_equal(still, live)  # the same pixels (the widget's PNG is encoded faster)


def test_an_update_at_128_by_128_is_interactive():
    ex = pe_explorer(seq_len=128, d_model=128)
    times = []
    for dim in range(20, 40, 2):
        ex.controls["dim"].value = dim
        times.append(ex.last_update_s)
    assert ex.table.shape == (128, 128) and sorted(ex.curves) == [38, 39]
    assert len(times) == 10 and all(0 < t < 2 for t in times), times  # 2 s allows a loaded machine
