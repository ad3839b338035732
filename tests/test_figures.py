"""`make figures` reproduces every committed image in figures/.

Figures drawn from fixed data or seeded untrained models must match byte-for-byte
(figure_to_png writes no timestamp; matplotlib is pinned; one CPU thread).

The two notebook-07 figures come from 300 and 600 training steps. Here they reproduce
byte-for-byte too, but float sums may round differently on another CPU (other SIMD
kernels), and training amplifies that: with 2 threads instead of 1, the cross-attention
heatmap's cells moved by up to 0.10 of full colour scale (26/255, mean 0.003) and the loss
curves by 1/255 in 60 pixels. So they are compared as decoded pixels with a stated
tolerance: every channel of every pixel within 0.25 of full scale, and a mean absolute
difference of at most 0.01. A one-character change in a title, or a 10 x 10 block of
changed pixels, breaks it (tested below).
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import make_figures  # noqa: E402

FIGURES = ROOT / "figures"
TRAINED = {"cross_attention", "training_curves"}  # compared with a pixel tolerance (see above)
MAX_CHANNEL_DIFF, MAX_MEAN_DIFF = 0.25, 0.01
_cache: dict[str, tuple[bytes, list[str]]] = {}


def rendered(name: str) -> tuple[bytes, list[str]]:
    """(PNG bytes, warning messages) of one figure, built once per test session (training is slow)."""
    if name not in _cache:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            png = make_figures.render(name)
        _cache[name] = png, [str(w.message) for w in caught]
    return _cache[name]


def pixels(png: bytes) -> np.ndarray:
    return mpimg.imread(io.BytesIO(png))  # (rows, cols, RGBA) floats in [0, 1]


def pixel_mismatch(png: bytes, reference: bytes) -> str | None:
    """Why two PNGs differ beyond the tolerance, or None if they are within it."""
    a, b = pixels(png), pixels(reference)
    if a.shape != b.shape:
        return f"size {a.shape[1]}x{a.shape[0]} != {b.shape[1]}x{b.shape[0]}"
    diff = np.abs(a - b)
    if diff.max() > MAX_CHANNEL_DIFF or diff.mean() > MAX_MEAN_DIFF:
        n = int((diff.max(-1) > MAX_CHANNEL_DIFF).sum())
        return f"max channel diff {diff.max():.3f}, mean {diff.mean():.4f}, {n} pixels off by > {MAX_CHANNEL_DIFF}"
    return None


def committed() -> set[str]:
    return {p.name for p in FIGURES.iterdir() if p.name != ".gitkeep"}


def test_every_committed_figure_is_built_and_every_built_one_committed():
    assert committed() == {f"{name}.png" for name in make_figures.REGISTRY}


@pytest.mark.parametrize("name", sorted(make_figures.REGISTRY))
def test_figure_is_reproduced(name):
    png, caught = rendered(name)
    reference = (FIGURES / f"{name}.png").read_bytes()
    assert not caught, f"{name}: warnings while drawing: {caught}"  # e.g. "Glyph ... missing from font"
    assert len(png) < 200_000
    if name in TRAINED:
        problem = pixel_mismatch(png, reference)
        assert problem is None, f"{name}.png: {problem}; run `make figures` if the change is intended"
    else:
        same_pixels = pixel_mismatch(png, reference) is None and np.array_equal(pixels(png), pixels(reference))
        assert png == reference, (
            f"{name}.png differs from a fresh build ("
            + ("same pixels: another PNG encoder, check the Pillow version" if same_pixels
               else "the drawing changed; run `make figures` if that is intended") + ")"
        )


def test_thumbnail_sizes():
    for name in sorted(make_figures.REGISTRY):
        h, w = pixels((FIGURES / f"{name}.png").read_bytes()).shape[:2]
        assert 300 <= w <= 800 and 120 <= h <= 500, f"{name}.png is {w}x{h} pixels"


def test_a_changed_drawing_is_detected():
    fig = make_figures.REGISTRY["pe_heatmap"]()
    fig.axes[0].set_title("Sinusoidal PE: 64 positions x 128 dimension")  # one letter less
    changed = make_figures.figure_to_png(fig)
    reference = (FIGURES / "pe_heatmap.png").read_bytes()
    assert changed != reference
    assert pixel_mismatch(changed, reference) is not None  # even the tolerant comparison sees it


def test_the_tolerance_passes_rounding_noise_and_catches_a_small_block():
    reference = (FIGURES / "training_curves.png").read_bytes()
    img = pixels(reference)
    rng = np.random.default_rng(0)
    noisy = np.clip(img + rng.choice([-1, 0, 1], size=img.shape) / 255, 0, 1)
    noisy[..., 3] = 1.0
    block = img.copy()
    block[100:110, 200:210, :3] = 1 - block[100:110, 200:210, :3]
    for arr, ok in ((noisy, True), (block, False)):
        buf = io.BytesIO()
        mpimg.imsave(buf, arr, format="png")
        assert (pixel_mismatch(buf.getvalue(), reference) is None) == ok


def test_cli_lists_and_writes(tmp_path, capsys):
    assert make_figures.main(["--list"]) == 0
    assert capsys.readouterr().out.split() == list(make_figures.REGISTRY)
    assert make_figures.main(["--out", str(tmp_path / "out"), "causal_mask", "architecture"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["architecture.png", "causal_mask.png"]
    assert (tmp_path / "out" / "causal_mask.png").read_bytes() == (FIGURES / "causal_mask.png").read_bytes()
    with pytest.raises(SystemExit):
        make_figures.main(["--out", str(tmp_path), "no_such_figure"])
    with pytest.raises(ValueError, match="unknown figure"):
        make_figures.render("no_such_figure")
