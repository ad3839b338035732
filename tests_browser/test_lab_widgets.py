"""Real-browser test: JupyterLab in headless Chromium, as a learner meets the notebooks.

Every notebook: start JupyterLab (127.0.0.1, random port, token), open the notebook with
its outputs cleared, Run All, and fail on any error or stderr output, any widget that did
not render, and any broken image. Then drive every control of every explorer (sliders,
checkboxes, dropdowns, text boxes, buttons) and assert that its plot changed and settled;
the latency from the key press to the new picture is printed per control. Windowed
rendering is turned off so every cell is in the DOM. Screenshots go to artifacts/browser/.

Also, as a learner meets them (JupyterLab started as `make lab` starts it, with
tools/jupyter_lab_config.py, at 1024 x 900 with the file browser open, autosave every 5 s):
- a notebook opened as shipped and left alone past an autosave stays byte-identical and unmodified;
- every explorer fits its output area (no horizontal scrollbar, each picture at its drawn size,
  so no text smaller than drawn); screenshots ``NN-eK-fit-1024.png``;
- a notebook run, saved and reopened with its kernel gone shows no widget error and its pictures;
- after a kernel restart the explorers say they are stale, and each explorer cell run alone
  (nothing above it) builds a live explorer again.

Needs Debian's chromium (`apt-get install chromium`; .ci/run installs it). The browser
is never downloaded.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import matplotlib.image
import nbformat
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
NOTEBOOKS = os.environ.get("BROWSER_NOTEBOOKS_DIR", str(ROOT / "notebooks"))
CHROME_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of the notebooks whose outputs were cleared."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium)")
    root = tmp_path_factory.mktemp("lab")
    (root / "notebooks").mkdir()
    (root / "notebooks" / "stored").mkdir()
    for src in Path(NOTEBOOKS).glob("*.ipynb"):
        shutil.copy(src, root / "notebooks" / "stored" / src.name)  # as shipped, outputs and all
        nb = nbformat.read(src, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, root / "notebooks" / src.name)
    config = root / "config"
    (config / "labconfig").mkdir(parents=True)
    # The news pop-up would cover the page.
    (config / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
    )
    # Every cell in the DOM (JupyterLab 4 renders only the cells near the viewport by default),
    # so broken images and widget errors anywhere in a notebook are seen.
    settings = root / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    # Autosave every 5 s (120 s by default), so "left alone past an autosave" takes seconds.
    docmanager = root / "settings" / "@jupyterlab" / "docmanager-extension"
    docmanager.mkdir(parents=True)
    (docmanager / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": True, "autosaveInterval": 5}))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config), JUPYTER_RUNTIME_DIR=str(root / "runtime"),
               JUPYTER_DATA_DIR=str(root / "data"), JUPYTERLAB_SETTINGS_DIR=str(root / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"), PYTHONHASHSEED="0", TQDM_DISABLE="1")
    # Trusted, as a notebook the learner has saved once: JupyterLab then renders a stored widget
    # view (untrusted notebooks fall back to the picture by themselves).
    subprocess.run([sys.executable, "-m", "jupyter", "trust", *map(str, (root / "notebooks" / "stored").glob("*.ipynb"))],
                   env=env, check=True, capture_output=True)  # fmt: skip
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--config={ROOT / 'tools' / 'jupyter_lab_config.py'}",
           "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={root / 'notebooks'}", "--ServerApp.terminals_enabled=False",
           "--LabApp.expose_app_in_browser=True", "--allow-root"]
    log = open(root / "lab.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("JupyterLab did not start:\n" + (root / "lab.log").read_text()[-3000:])
            time.sleep(0.5)
        with urllib.request.urlopen(f"{url}/api/status", timeout=5) as r:  # no token: must be refused
            pytest.fail(f"JupyterLab answered without a token (HTTP {r.status})")
    except urllib.error.HTTPError as e:
        assert e.code == 403, e
        yield url, token, root / "notebooks"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / "lab.log", ARTIFACTS / "lab.log")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_FLAGS)
        yield b
        b.close()


def _pixels(png: bytes) -> np.ndarray:
    return matplotlib.image.imread(io.BytesIO(png), format="png")


def _wait_for_kernel(page) -> None:
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget", timeout=30_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # Wait for the kernel itself (the status indicator says "idle" before one exists), or
    # Run All races its start.
    page.wait_for_function(
        "() => { const s = window.jupyterapp.shell.currentWidget.sessionContext;"
        " return s && s.session && s.session.kernel && s.session.kernel.status === 'idle'; }",
        timeout=90_000,
    )


def _run_all(page, timeout_s: float = 180) -> None:
    _wait_for_kernel(page)
    # Fire and forget: the command's promise settles only when every cell has run, and
    # evaluate() would block on it with no timeout of its own.
    page.evaluate("() => { window.jupyterapp.commands.execute('runmenu:run-all'); }")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        # Read the model, not the DOM: JupyterLab renders only the cells near the viewport.
        counts = page.evaluate(
            "() => { const nb = window.jupyterapp.shell.currentWidget;"
            " const out = []; const cells = nb.content.model.cells;"
            " for (let i = 0; i < cells.length; i++) { const c = cells.get(i);"
            " if (c.type === 'code') out.push(c.executionCount); }"
            " return [out, nb.sessionContext.session.kernel.status]; }"
        )
        if all(isinstance(n, int) for n in counts[0]) and counts[1] == "idle":
            return
        time.sleep(1)
    raise AssertionError(f"Run All did not finish in {timeout_s} s: execution counts {counts}")


def _srcs(panels) -> str:
    return "|".join(panels.evaluate("el => Array.from(el.querySelectorAll('img')).map(i => i.getAttribute('src'))"))


def _settled_src(panels, timeout_s: float = 30, old: str | None = None) -> str:
    """Wait for the explorer's pictures (its panels) to change from ``old`` (if given) and then stay the same for 1.5 s."""
    img = panels
    deadline = time.monotonic() + timeout_s
    last, since = _srcs(img), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = _srcs(img)
        if now != last:
            last, since = now, time.monotonic()
        elif (old is None or now != old) and time.monotonic() - since > 1.5:
            return now
    raise AssertionError("the widget image did not change and settle in time")


# Each control kind: a CSS selector and how a learner changes it. An action returns how to undo
# it, so every control is tried from the explorer's default state (top-k = 1 would leave top-p
# nothing to change).
def _press_slider(control):
    handle = control.locator(".noUi-handle").first
    now, high = (float(handle.get_attribute(a)) for a in ("aria-valuenow", "aria-valuemax"))
    at_max = now >= high - 1e-9  # compared as numbers: "1" and "1.00" are the same end
    handle.focus()
    handle.press("ArrowLeft" if at_max else "ArrowRight")  # one step: the latency is one redraw
    return lambda: handle.press("ArrowRight" if at_max else "ArrowLeft")


def _click_checkbox(control):
    box = control.locator("input[type=checkbox]")
    box.click()
    return box.click


def _next_option(control):
    select = control.locator("select")
    n, i = select.evaluate("el => [el.options.length, el.selectedIndex]")
    select.select_option(index=(i + 1) % n)
    return lambda: select.select_option(index=i)


def _type_text(control):
    # Its own first character again, at the front: every model knows it (08's Chinese model has no
    # digits), and the reversal model's source keeps only its first digits, so the end would not do.
    box = control.locator("input[type=text], textarea").first
    box.click()
    box.press("Control+Home")
    box.type(box.input_value()[:1] or "7")

    def undo():
        box.press("Control+Home")
        box.press("Delete")

    return undo


def _click_button(control) -> None:
    control.click()


CONTROLS = [
    (".widget-slider, .widget-hslider", _press_slider),
    (".widget-checkbox", _click_checkbox),
    (".widget-dropdown", _next_option),
    (".widget-text, .widget-textarea", _type_text),
    ("button.jupyter-button", _click_button),
]
NOTEBOOK_FILES = sorted(p.name for p in Path(NOTEBOOKS).glob("*.ipynb"))


RUN_ABOVE = "run the cells of section"  # 07's reversal explorer after a restart: its model is trained above


def _check_clean(page, name: str, expected_errors: int = 0) -> None:
    """No error, warning, widget failure or broken image on the page; ``expected_errors`` errors are
    allowed only if each is our own "run the cells of section ... first" message."""
    stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    shown = [stderr.nth(k).inner_text() for k in range(stderr.count())]
    unexpected = [t for t in shown if RUN_ABOVE not in t]
    assert len(shown) == expected_errors and not unexpected, (
        f"{name}: a cell shows an error or a warning: {(unexpected or shown or [''])[0][:500]}")
    text = page.locator(".jp-Notebook").inner_text()
    for bad in ("Error displaying widget", "Loading widget...") + (() if expected_errors else ("Traceback (most recent call last)",)):
        assert bad not in text, f"{name}: the page shows {bad!r}"
    broken = page.evaluate(
        "() => Array.from(document.querySelectorAll('.jp-Notebook img'))"
        ".filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src') || '').map(s => s.slice(0, 80))"
    )
    assert not broken, f"{name}: broken images: {broken}"


WATCH_SRC = """img => {
    window.__srcChangedAt = null;
    if (window.__srcWatch) window.__srcWatch.disconnect();
    window.__srcWatch = new MutationObserver(() => {
        if (window.__srcChangedAt === null) window.__srcChangedAt = performance.now();
    });
    window.__srcWatch.observe(img, {attributes: true, attributeFilter: ["src"], subtree: true});
    window.__actionAt = performance.now();
}"""


def _drive_explorers(page, name: str) -> list[tuple[str, float, int]]:
    """Move every control of every explorer; return (control, latency s, changed pixels)."""
    results = []
    for e, area in enumerate(_explorer_areas(page)):
        # The explorer's panels: one picture each, in one wrapping row (helpers.widgets.base.Panels).
        img = area.locator(".widget-hbox:has(> img.widget-image)").first
        area.scroll_into_view_if_needed()
        area.screenshot(path=str(ARTIFACTS / f"{name[:2]}-e{e}-explorer.png"))  # controls and plot, as laid out
        for selector, act in CONTROLS:
            controls = area.locator(selector)
            for c in range(controls.count()):
                control = controls.nth(c)
                label = f"{name[:2]}-e{e}-{act.__name__.strip('_')}{c}"
                if control.evaluate("el => el.querySelector('[disabled]') !== null"):
                    print(f"{label}: greyed out (one value only), not moved")  # e.g. a 1-layer model's layer
                    continue
                control.scroll_into_view_if_needed()
                before_src = _settled_src(img)
                before = img.screenshot()
                # Timed in the page: from just before the action to the first new `src` (a
                # MutationObserver), so polling from here adds nothing to the number.
                img.evaluate(WATCH_SRC)
                undo = act(control)
                page.wait_for_function("() => window.__srcChangedAt !== null", timeout=30_000)
                latency = page.evaluate("() => (window.__srcChangedAt - window.__actionAt) / 1000")
                _settled_src(img, old=before_src)
                after = img.screenshot(path=str(ARTIFACTS / f"{label}.png"))
                a, b = _pixels(before), _pixels(after)
                changed = int(np.any(np.abs(a - b) > 1e-6, axis=-1).sum()) if a.shape == b.shape else a.size
                print(f"{label}: {changed} pixels changed, first new picture after {latency * 1000:.0f} ms")
                # Some pixels, not many: one step of temperature barely moves a peaked distribution
                # (08's prompt ends a line, so the next character is "，" or "。" almost surely).
                assert changed > 0, f"{label}: moving the control did not change the plot"
                results.append((label, latency, changed))
                if undo is not None:
                    undo()
                    _settled_src(img)
    return results


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _shutdown_kernels(url: str, token: str) -> None:
    """End every session (kernel) the tests started: 2 cores do not run seven idle kernels well."""
    with urllib.request.urlopen(f"{url}/api/sessions?token={token}", timeout=10) as r:
        sessions = json.load(r)
    for session in sessions:
        req = urllib.request.Request(f"{url}/api/sessions/{session['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()


def _open_file_browser(page) -> None:
    """The file browser open on the left, as JupyterLab starts (the narrowest output area: 577 px at 1024)."""
    page.evaluate("() => { if (window.jupyterapp.shell.leftCollapsed) window.jupyterapp.commands.execute('filebrowser:activate'); }")
    page.wait_for_function("() => !window.jupyterapp.shell.leftCollapsed", timeout=10_000)
    page.wait_for_timeout(500)  # the layout settles


def _explorer_areas(page):
    areas = page.locator(".jp-OutputArea-output:has(img.widget-image)")
    return [areas.nth(i) for i in range(areas.count())]


def _check_fit(page, name: str) -> list[str]:
    """Every explorer fits its output area: no horizontal scrollbar, each picture at its drawn size."""
    report = []
    for e, area in enumerate(_explorer_areas(page)):
        area.scroll_into_view_if_needed()
        m = area.evaluate("""el => ({area: el.clientWidth, scroll: el.scrollWidth,
            overflow: Array.from(el.querySelectorAll('*')).some(c => c.scrollWidth > c.clientWidth + 1
                && getComputedStyle(c).overflowX !== 'visible' && getComputedStyle(c).overflowX !== 'hidden'),
            imgs: Array.from(el.querySelectorAll('img.widget-image')).map(i => [i.getBoundingClientRect().width,
                i.naturalWidth, i.getBoundingClientRect().right - el.getBoundingClientRect().right])})""")
        area.screenshot(path=str(ARTIFACTS / f"{name[:2]}-e{e}-fit-1024.png"))
        report.append(f"{name[:2]}-e{e}: output area {m['area']} px, pictures {[round(w) for w, _, _ in m['imgs']]} px")
        assert m["scroll"] <= m["area"] + 1 and not m["overflow"], f"{name} explorer {e}: a horizontal scrollbar ({m})"
        for shown, drawn, past in m["imgs"]:
            assert abs(shown - drawn) <= 1, f"{name} explorer {e}: a picture drawn {drawn} px wide is shown at {shown:.0f} px"
            assert past <= 1, f"{name} explorer {e}: a picture reaches {past:.0f} px past the output area"
    return report


def _explorer_cells(page) -> list[int]:
    """Indices of the cells whose output is an explorer (a live widget view beside a picture)."""
    return page.evaluate(
        "() => { const cells = window.jupyterapp.shell.currentWidget.content.model.cells; const found = [];"
        " for (let i = 0; i < cells.length; i++) { const c = cells.get(i); if (c.type !== 'code') continue;"
        "  const outs = c.outputs.toJSON(); if (outs.some(o => o.data && o.data['" + WIDGET_MIME + "']"
        "   && o.data['image/png'])) found.push(i); } return found; }"
    )


def _wait_idle(page, timeout_ms: int = 120_000) -> None:
    page.wait_for_timeout(300)
    page.wait_for_function(
        "() => { const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;"
        " return k && k.status === 'idle'; }", timeout=timeout_ms)  # fmt: skip


def _restart_then_run_explorers_alone(page, name: str) -> int:
    """After a kernel restart the explorers say they are stale; each explorer cell run alone builds a live
    one, or (a model trained in the notebook) says which cells to run first. Returns how many said so."""
    cells = _explorer_cells(page)
    if not cells:
        return 0
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
    _wait_idle(page)
    page.wait_for_timeout(1000)
    stale = page.locator(".course-stale:visible").count()
    assert stale == len(cells), f"{name}: {stale} of {len(cells)} explorers say their kernel is gone after a restart"
    count = "(i) => window.jupyterapp.shell.currentWidget.content.model.cells.get(i).executionCount"
    trained_here: list[int] = []
    for i in cells:
        page.evaluate(f"() => {{ const nb = window.jupyterapp.shell.currentWidget; nb.content.activeCellIndex = {i};"
                      " window.jupyterapp.commands.execute('notebook:run-cell'); }")  # fmt: skip
        # Ran: a new execution count (the restarted kernel counts from 1), then idle.
        page.wait_for_function(f"() => ({count})({i}) === 1 + {cells.index(i)}", timeout=120_000)
        _wait_idle(page)
        out = page.evaluate(
            f"() => window.jupyterapp.shell.currentWidget.content.model.cells.get({i}).outputs.toJSON()")
        errors = [o for o in out if o.get("output_type") == "error"]
        if errors and errors[0]["ename"] == "RuntimeError" and RUN_ABOVE in errors[0]["evalue"]:
            trained_here.append(i)  # a model trained in the notebook (07's reversal): it says what to run first
            continue
        assert not errors, f"{name}: explorer cell {i} run alone after a restart: {errors[0]['ename']}: {errors[0]['evalue']}"
        assert any(WIDGET_MIME in o.get("data", {}) for o in out), f"{name}: explorer cell {i} shows no explorer"
    page.wait_for_timeout(1000)
    # A cell that ran (its error included) replaced its stale explorer: none may still say it is stale.
    assert page.locator(".course-stale:visible").count() == 0, f"{name}: an explorer still says it is stale"
    _check_clean(page, f"{name} (explorer cells run alone after a restart)", expected_errors=len(trained_here))
    return len(trained_here)


def _save(page) -> None:
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=60_000)


@pytest.mark.parametrize("notebook", NOTEBOOK_FILES, ids=lambda n: n[:2])
def test_notebook_runs_clean_and_explorers_respond(lab, browser, notebook):
    url, token, folder = lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    try:
        page.goto(f"{url}/lab/tree/{notebook}?reset&token={token}", wait_until="domcontentloaded")
        start = time.monotonic()
        try:
            _run_all(page, timeout_s=420)
        finally:
            page.screenshot(path=str(ARTIFACTS / f"{notebook[:2]}-page.png"))
        print(f"{notebook}: Run All took {time.monotonic() - start:.1f} s")
        _check_clean(page, notebook)
        # What Run All leaves is what the notebook's last lines set: no value echoed back by a slider later.
        page.wait_for_timeout(1500)
        readouts = page.locator(".widget-slider:has(label:text-is('temperature')) .widget-readout")
        for r in range(readouts.count() if notebook.startswith("04") else 0):
            assert readouts.nth(r).inner_text() == "1.00", f"{notebook}: temperature shows {readouts.nth(r).inner_text()}"
        _open_file_browser(page)
        for line in _check_fit(page, notebook):
            print(line)
        results = _drive_explorers(page, notebook)
        if results:
            lat = sorted(r[1] for r in results)
            print(f"{notebook}: {len(results)} controls, median latency {lat[len(lat) // 2] * 1000:.0f} ms")
        _check_clean(page, notebook)  # moving the controls raised nothing either
        expected_errors = _restart_then_run_explorers_alone(page, notebook)
        _save(page)
    finally:
        page.close()
    # Reopened with its kernel gone, the saved notebook shows its pictures, no "model not found".
    _shutdown_kernels(url, token)
    saved = nbformat.read(folder / notebook, as_version=4)
    outputs = [o for c in saved.cells if c.cell_type == "code" for o in c.outputs]
    assert not any(WIDGET_MIME in o.get("data", {}) and "image/png" in o.get("data", {}) for o in outputs)
    pngs = sum("image/png" in o.get("data", {}) for o in outputs)
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    try:
        page.goto(f"{url}/lab/tree/{notebook}?reset&token={token}", wait_until="domcontentloaded")
        _wait_for_kernel(page)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(ARTIFACTS / f"{notebook[:2]}-reopened.png"))
        _check_clean(page, f"{notebook} (saved and reopened)", expected_errors=expected_errors)
        shown = page.locator(".jp-OutputArea-output[data-mime-type='image/png'] img").count()
        assert shown == pngs, f"{notebook} (saved and reopened): {pngs} pictures are stored but {shown} show"
    finally:
        page.close()
        _shutdown_kernels(url, token)


@pytest.mark.parametrize("notebook", NOTEBOOK_FILES, ids=lambda n: n[:2])
def test_stored_outputs_show_their_pictures_before_anything_runs(lab, browser, notebook):
    """A learner opens a notebook as shipped (and trusted): every stored picture shows, an
    explorer's too, and no "Error displaying widget" where an explorer's output is."""
    url, token, _ = lab
    stored = nbformat.read(Path(NOTEBOOKS) / notebook, as_version=4)
    pngs = sum("image/png" in out.get("data", {}) for c in stored.cells if c.cell_type == "code" for out in c.outputs)
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    try:
        page.goto(f"{url}/lab/tree/stored/{notebook}?reset&token={token}", wait_until="domcontentloaded")
        _wait_for_kernel(page)  # the widget manager has looked for its models by now
        page.wait_for_timeout(1500)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{notebook[:2]}-stored.png"), full_page=True)
        _check_clean(page, f"{notebook} (stored outputs)")
        shown = page.locator(".jp-OutputArea-output[data-mime-type='image/png'] img").count()
        assert shown == pngs, f"{notebook}: {pngs} pictures are stored but {shown} show"
    finally:
        page.close()


@pytest.mark.parametrize("notebook", NOTEBOOK_FILES, ids=lambda n: n[:2])
def test_opening_a_notebook_and_waiting_past_an_autosave_changes_nothing(lab, browser, notebook):
    """As shipped, opened, its kernel started, left alone past an autosave (every 5 s here): the file
    is byte-identical and the tab is not marked modified (no "Save your work?" on closing)."""
    url, token, folder = lab
    shipped = (Path(NOTEBOOKS) / notebook).read_bytes()
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    try:
        page.goto(f"{url}/lab/tree/stored/{notebook}?reset&token={token}", wait_until="domcontentloaded")
        _wait_for_kernel(page)
        page.wait_for_timeout(12_000)  # JupyterLab marked it modified about 4 s after opening; autosave 5 s
        dirty = page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty")
        assert not dirty, f"{notebook}: opening it marked it modified"
    finally:
        page.close()
        _shutdown_kernels(url, token)
    assert (folder / "stored" / notebook).read_bytes() == shipped, f"{notebook}: opening it changed the file"
