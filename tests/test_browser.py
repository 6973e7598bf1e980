"""A real browser on the training panel: JupyterLab (headless, random port, token, a temporary root
holding a copy of notebooks/01_quick_start.ipynb), the system Chromium driven by Playwright. Runs
every cell, presses Start, sees the curve image change and a `panel.start()` cell refused while the
run goes, presses Stop, sees the run stop, checks no label of the panels is cut off, raises the
budget, presses Continue, presses Stop again, checks the run folder's config.yaml holds the raised
budget, its metrics.csv's env-steps and time_s go on over Continue and the throughput axis fits its
data, then Continues to a budget 8 iterations further and sees it finish there, in the same run
folder, with the same checks. Then a second
notebook, made here from notebook 02's `%%warpenv` cell, shows that env's own drawing and Tag in
the rollout viewer. Saves screenshots (browser.png under pytest's tmp dir, copied to
$WORKBENCH_ARTIFACTS when set); with WORKBENCH_SCREENSHOTS=DIR (docs/figures for the docs) it also
writes the cropped figures that docs/notebooks.md shows: panel-cartpole.png, panel-form.png,
viewer-custom-draw.png, viewer-tag.png.

Skipped when Chromium, Playwright or JupyterLab is missing, unless WORKBENCH_REQUIRE_BROWSER=1
(CI sets it after .ci/browser_setup.sh), which turns a missing piece into a failure.
"""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "01_quick_start.ipynb"
GALLERY = "viewers.ipynb"  # made by _gallery_notebook in the server's root
CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
REQUIRED = os.environ.get("WORKBENCH_REQUIRE_BROWSER") == "1"
RUN_ALL_TIMEOUT_S = 420


def _require(ok: bool, why: str):
    if ok:
        return
    if REQUIRED:
        pytest.fail(f"browser test cannot run: {why}. WORKBENCH_REQUIRE_BROWSER=1 makes this a failure; "
                    f"install the pieces with `bash .ci/browser_setup.sh`", pytrace=False)
    pytest.skip(f"browser test skipped: {why} (bash .ci/browser_setup.sh installs it)")


def _importable(name: str) -> bool:
    try:
        __import__(name)
        return True
    except Exception:  # noqa: BLE001 - any failure to import means the piece is not usable
        return False


def _widgets_extension_visible() -> bool:
    """The labextension that renders widgets, where this Python's JupyterLab server looks for it."""
    from jupyter_core.paths import jupyter_path
    return any((Path(d) / "@jupyter-widgets" / "jupyterlab-manager").is_dir() for d in jupyter_path("labextensions"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(directory: Path):
    """User settings of the test's JupyterLab: every cell in the DOM, no news or update pop-ups."""
    files = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                              "checkForUpdates": False},
    }
    for name, content in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))


@pytest.fixture
def lab(tmp_path):
    _require(Path(CHROMIUM).exists() and os.access(CHROMIUM, os.X_OK), f"no Chromium at {CHROMIUM}")
    _require(_importable("playwright.sync_api"), "the playwright package is not installed")
    _require(_importable("jupyterlab"), "jupyterlab is not installed")
    _require(_importable("jupyterlab_widgets"), "the ipywidgets JupyterLab extension (jupyterlab_widgets) is missing")
    _require(_widgets_extension_visible(), "JupyterLab would not find the ipywidgets extension on its data path "
             "(a venv made with --system-site-packages hides the parent's share/jupyter): widgets would show as "
             "text; pip install jupyterlab_widgets into this environment")
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    _gallery_notebook(root / GALLERY)
    _settings(tmp_path / "settings")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, WORKBENCH_SMALL="1", WORKBENCH_TARGET="cpu",
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    log = open(tmp_path / "jupyterlab.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.perf_counter() + 90
    while True:
        try:
            req = urllib.request.Request(f"{base}/api/status", headers={"Authorization": f"token {token}"})
            with urllib.request.urlopen(req, timeout=2) as reply:
                if reply.status == 200:
                    break
        except OSError:
            pass
        if server.poll() is not None or time.perf_counter() > deadline:
            log.flush()
            server.kill()
            pytest.fail(f"JupyterLab did not start:\n{(tmp_path / 'jupyterlab.log').read_text()[-3000:]}")
        time.sleep(0.5)
    yield {"url": f"{base}/lab/tree/{NOTEBOOK.name}?token={token}", "base": base, "token": token,
           "gallery_url": f"{base}/lab/tree/{GALLERY}?token={token}", "root": root,
           "log": tmp_path / "jupyterlab.log"}
    try:  # a clean shutdown also ends the kernels the server started
        req = urllib.request.Request(f"{base}/api/shutdown", method="POST",
                                     headers={"Authorization": f"token {token}"})
        urllib.request.urlopen(req, timeout=10).close()
        server.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    log.close()


def _gallery_notebook(path: Path):
    """A notebook showing two drawings in the rollout viewer: the env of notebook 02's `%%warpenv`
    cell (its own `draw(frame, ax)`) and Tag with random actions."""
    import nbformat
    tutorial = nbformat.read(ROOT / "notebooks" / "02_write_an_env.ipynb", as_version=4)
    warpenv = next(c.source for c in tutorial.cells if c.source.startswith("%%warpenv predator_prey "))
    cells = [
        "%load_ext workbench\nimport workbench as wb\nfrom workbench import render\nAGENTS = 8",
        warpenv,
        "env = wb.make('predator_prey', num_envs=4, target='cpu', seed=3)\n"
        "episodes = render.record_episode(env, replicas=[0], max_steps=32)\n"
        "print('drawn by', type(render.drawer_for(episodes[0], env)).__name__)\n"
        "render.show(episodes, env)",
        "tag = wb.make('tag_continuous', num_envs=4, target='cpu', seed=1, num_taggers=3, num_runners=12,\n"
        "              episode_length=60, tagging_distance=0.12)\n"
        "render.show(render.record_episode(tag, replicas=[0]), tag)",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _save_figure(page, path: Path, *elements, pad: int = 8, max_height: float | None = None):
    """Screenshot of the region holding `elements` (locators; at most `max_height` px of it), written
    to $WORKBENCH_SCREENSHOTS when set (docs/figures regenerates the docs' figures)."""
    elements[0].evaluate("e => e.scrollIntoView({block: 'center'})")  # clear of the sticky toolbar
    time.sleep(0.3)
    boxes = [e.bounding_box() for e in elements]
    x0, y0 = min(b["x"] for b in boxes) - pad, min(b["y"] for b in boxes) - 2  # not the line above
    x1 = max(b["x"] + b["width"] for b in boxes) + pad
    y1 = max(b["y"] + b["height"] for b in boxes) + pad
    if max_height:
        y1 = min(y1, y0 + max_height)
    page.screenshot(path=str(path), clip={"x": max(x0, 0), "y": max(y0, 0), "width": x1 - max(x0, 0),
                                          "height": y1 - max(y0, 0)})
    target = os.environ.get("WORKBENCH_SCREENSHOTS")
    if target:
        directory = Path(target) if Path(target).is_absolute() else ROOT / target
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, directory / path.name)


def _frame_pixels(player):
    """RGB pixels [H, W, 3] of the frame the player shows."""
    import base64
    import io

    import numpy as np
    from PIL import Image
    src = player.locator("img").get_attribute("src")
    data = base64.b64decode(src.split(",", 1)[1])
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)


def _near(pixels, rgb, tol=12) -> int:
    """How many pixels are within `tol` of colour `rgb` in every channel."""
    import numpy as np
    return int((np.abs(pixels - np.array(rgb)) <= tol).all(axis=-1).sum())


def _run_all(page, lab, name, failure_shot):
    """Open notebook `name`'s page, wait for its kernel, Run > Run All Cells, wait for every cell."""
    _wait(lambda: _notebook(page).locator(".jp-CodeCell").count() > 0, 90, f"{name} to open", page,
          failure_shot)
    _wait(lambda: _kernel_state(lab, name) == "idle", 120, f"the kernel of {name} to start", page, failure_shot)
    # Run > Run All Cells, through the menu as a person would
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    running = _notebook(page).locator(".jp-CodeCell .jp-InputPrompt", has_text="[*]")
    _wait(lambda: running.count() > 0
          or _cells_done(page)[0], 60, "the cells to start running", page, failure_shot)
    _wait(lambda: _cells_done(page)[0] and running.count() == 0,
          RUN_ALL_TIMEOUT_S, f"every cell of {name} to run", page, failure_shot)
    errors = _notebook(page).locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'], "
                          ".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
    tracebacks = [t for t in errors.all_inner_texts() if "Error" in t or "Traceback" in t]
    assert not tracebacks, tracebacks


def _to_last_frame(player):
    player.locator("input.wb-slider").evaluate("s => { s.value = s.max; s.dispatchEvent(new Event('input')); }")


def _save_artifact(path: Path):
    target = os.environ.get("WORKBENCH_ARTIFACTS")
    if target and path.exists():
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)


def _wait(predicate, timeout_s, what, page=None, shot=None):
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    if page is not None and shot is not None:
        page.screenshot(path=str(shot))
        _save_artifact(shot)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _kernel_state(lab, name=NOTEBOOK.name):
    """execution_state of the kernel of notebook `name`'s session (None before it exists)."""
    req = urllib.request.Request(f"{lab['base']}/api/sessions", headers={"Authorization": f"token {lab['token']}"})
    try:
        with urllib.request.urlopen(req, timeout=5) as reply:
            sessions = json.load(reply)
    except OSError:
        return None
    states = [s["kernel"].get("execution_state") for s in sessions if s.get("path", "").endswith(name)]
    return states[0] if states else None


def _notebook(page):
    """The notebook in the active tab (others stay in the DOM, hidden)."""
    return page.locator(".jp-NotebookPanel:visible")


def _cells_done(page):
    """(all code cells have run, their prompts) from the active notebook's input prompts."""
    prompts = _notebook(page).locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
    prompts = [p.strip() for p in prompts]
    return bool(prompts) and all(p.startswith("[") and p[1:-2].isdigit() for p in prompts), prompts


def _progress_iteration(panel) -> int:
    """The iteration the panel's progress line shows (0 before any)."""
    text = panel.locator(".wb-progress-text").inner_text()
    return int(text.split("iteration ")[1].split(" /")[0]) if "iteration " in text else 0


def _check_rows_go_on(path: Path, rows: int, continued_at: int):
    """metrics.csv holds `rows` rows, one per iteration, whose env-steps and time_s grow across the
    Continue after row `continued_at`."""
    import csv
    table = list(csv.DictReader(path.read_text().splitlines()))
    assert [int(r["iteration"]) for r in table] == list(range(1, rows + 1))
    times = [float(r["time_s"]) for r in table]
    steps = [int(r["env_steps"]) for r in table]
    assert times == sorted(times) and times[continued_at] > times[continued_at - 1], times
    assert steps == sorted(steps), steps


def _cut_labels(page) -> list:
    """The texts of the visible widget labels (and accordion titles) of the page's panels whose text
    is wider than their box: cut off with an ellipsis."""
    return page.evaluate("""() => [...document.querySelectorAll(
        '.wb-panel .widget-label, .wb-panel .widget-label-basic, .wb-panel .lm-AccordionPanel-title')]
        .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
        .map(e => e.textContent)""")


def _run_cell(page, code: str, marker: str, failure_shot) -> str:
    """Add a cell at the end of the active notebook, run it, return the last line of its output
    that starts with `marker`."""
    cells = _notebook(page).locator(".jp-CodeCell")
    count = cells.count()
    cells.last.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    _wait(lambda: _notebook(page).locator(".jp-CodeCell").count() == count + 1, 30, "a new cell", page,
          failure_shot)
    cell = _notebook(page).locator(".jp-CodeCell").last
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.insert_text(code)
    page.keyboard.press("Shift+Enter")
    output = cell.locator(".jp-OutputArea-output")
    _wait(lambda: marker in " ".join(output.all_inner_texts()), 60, f"the cell's {marker} line", page,
          failure_shot)
    return [line for line in "\n".join(output.all_inner_texts()).splitlines() if line.startswith(marker)][-1]


def _rate_axis_top(page) -> str:
    """The top of the panel's throughput axis over the largest rate it shows ("1.100": 10% headroom)."""
    code = ("from workbench.widgets.plots import rate_unit\n"
            "top = max(m['env_steps_per_s'] for m in panel.history)\n"
            "print('RATE-TOP', f\"{panel.plot.axes['rate'].get_ylim()[1] * rate_unit(top)[0] / top:.3f}\")")
    return _run_cell(page, code, "RATE-TOP", None).split()[1]


def test_panel_in_jupyterlab_starts_draws_and_stops(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    shot = tmp_path / "browser.png"
    failure_shot = tmp_path / "browser_failure.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        try:
            page.goto(lab["url"], wait_until="domcontentloaded", timeout=90_000)
            _run_all(page, lab, NOTEBOOK.name, failure_shot)

            panel = page.locator(".wb-panel").first
            panel.wait_for(state="visible", timeout=30_000)
            status = panel.locator(".wb-status")
            assert "finished" in status.inner_text(), status.inner_text()  # the run of panel.start() in a cell
            # the rollout viewer played an episode recorded during that run: its JS player works
            player = panel.locator(".wb-viewer .wb-player").first
            player.wait_for(state="visible", timeout=30_000)
            frame0 = player.locator("img").get_attribute("src")
            player.locator("input.wb-slider").evaluate(
                "s => { s.value = s.max; s.dispatchEvent(new Event('input')); }")
            assert player.locator("img").get_attribute("src") != frame0

            # a long budget in the generated form, then Start
            panel.locator(".jupyter-widget-Collapse-header, .lm-AccordionPanel-title, .widget-accordion-title",
                          has_text="Hyperparameters").first.click()
            budget = panel.locator(".wb-field-total_env_steps input")
            budget.wait_for(state="visible", timeout=10_000)
            budget.fill("100000000")
            budget.press("Enter")
            budget.blur()
            curves = panel.locator("img.wb-curves")
            before = curves.get_attribute("src")
            panel.locator("button.wb-start").click()
            _wait(lambda: "running" in status.inner_text() and curves.get_attribute("src") != before, 120,
                  "the run to start and redraw the curves", page, failure_shot)
            first = curves.get_attribute("src")
            _wait(lambda: curves.get_attribute("src") != first, 120, "the curves to change with new metrics",
                  page, failure_shot)
            progress = panel.locator(".wb-progress-text").inner_text()
            assert "env-steps/s" in progress and "ETA" in progress, progress
            assert panel.locator("button.wb-start").is_disabled()
            # the notebook's panel.start() cell run now (after Start, as its text invites) is refused,
            # in the cell and in the panel, and the run going goes on alone
            refused = _run_cell(page, "panel.start()", "RuntimeError", failure_shot)
            assert "Start refused: a run is going" in refused, refused
            assert "Start refused: a run is going" in panel.locator(".wb-notice").inner_text()
            assert "running" in status.inner_text()

            panel.locator("button.wb-stop").click()
            _wait(lambda: "stopped" in status.inner_text(), 120, "the run to stop", page, failure_shot)
            text = status.inner_text()
            assert text.startswith("stopped (Stop pressed) after"), text
            # widget models update independently in the page: let the last redraw's image land, then
            # several redraw intervals pass with nothing moving any more
            _wait(lambda: panel.locator("button.wb-start").is_enabled(), 60, "Start to be enabled again", page,
                  failure_shot)  # the redraw thread's last act
            time.sleep(1.5)
            stopped_src = curves.get_attribute("src")
            time.sleep(3.0)
            assert curves.get_attribute("src") == stopped_src
            assert status.inner_text() == text
            assert panel.locator("button.wb-stop").is_disabled()
            iterations = int(text.split("after ")[1].split(" iterations")[0])
            assert 1 <= iterations < 100_000_000 // (32 * 64)
            # every run is on disk: the status names its folder (relative to the notebook's directory)
            folder = text.split("; run folder ")[1].split(";")[0]
            run_dir = lab["root"] / folder
            assert (run_dir / "config.yaml").is_file() and (run_dir / "metrics.csv").is_file(), folder
            rows = len((run_dir / "metrics.csv").read_text().splitlines())

            # Start again continues the stopped run: same trainer and folder, the iteration count goes
            # on under a raised budget; Stop again, then Continue once more to a budget 8 iterations
            # further (the run ends by itself at 100%)
            header = panel.locator(".jupyter-widget-Collapse-header, .lm-AccordionPanel-title, "
                                   ".widget-accordion-title", has_text="Hyperparameters").first
            per_iteration = 32 * 64  # the notebook's small size: replicas x rollout_length
            raised = per_iteration * (iterations + 100_000)
            budget.fill(str(raised))
            budget.press("Enter")
            budget.blur()
            assert _cut_labels(page) == []  # every label of the panels and the open form reads whole
            _save_figure(page, tmp_path / "panel-form.png", panel.locator(".wb-forms"), max_height=560)
            header.click()  # fold the form: the panel's figure shows the controls, progress and curves
            start = panel.locator("button.wb-start")
            _wait(lambda: start.inner_text().strip() == "Continue", 30, "Start to read Continue", page,
                  failure_shot)
            start.click()
            _wait(lambda: "continuing" in status.inner_text(), 120, "the run to continue", page, failure_shot)
            _wait(lambda: _progress_iteration(panel) >= iterations + 3, 120, "three iterations after Continue", page,
                  failure_shot)
            panel.locator("button.wb-stop").click()
            _wait(lambda: status.inner_text().startswith("stopped"), 120, "the continued run to stop", page,
                  failure_shot)
            _wait(lambda: start.is_enabled(), 60, "Start to be enabled again", page, failure_shot)
            second = status.inner_text()
            continued = int(second.split("after ")[1].split(" iterations")[0])
            assert continued > iterations and second.split("; run folder ")[1].split(";")[0] == folder, second
            # the run folder says what the run trains to now, and its rows go on over Continue
            assert f"total_env_steps: {raised}" in (run_dir / "config.yaml").read_text()
            _check_rows_go_on(run_dir / "metrics.csv", continued, iterations)
            assert _rate_axis_top(page) == "1.100", "the throughput axis does not fit its data after Continue"

            budget_value = per_iteration * (continued + 8)
            header.click()
            budget.fill(str(budget_value))
            budget.press("Enter")
            budget.blur()
            header.click()
            _wait(lambda: start.inner_text().strip() == "Continue", 30, "Start to read Continue", page, failure_shot)
            start.click()
            _wait(lambda: "continuing" in status.inner_text() or status.inner_text().startswith("finished"),
                  120, "the run to continue again", page, failure_shot)
            _wait(lambda: status.inner_text().startswith("finished"), 300, "the continued run to finish", page,
                  failure_shot)
            _wait(lambda: start.is_enabled(), 60, "Start to be enabled again", page, failure_shot)
            again = status.inner_text()
            assert int(again.split("after ")[1].split(" iterations")[0]) == continued + 8, again
            assert again.split("; run folder ")[1].split(";")[0] == folder, again
            assert len((run_dir / "metrics.csv").read_text().splitlines()) > rows
            assert f"total_env_steps: {budget_value}" in (run_dir / "config.yaml").read_text()
            _check_rows_go_on(run_dir / "metrics.csv", continued + 8, continued)
            assert "100.0%" in panel.locator(".wb-progress-text").inner_text()
            assert _rate_axis_top(page) == "1.100", "the throughput axis does not fit its data after the run ended"
            time.sleep(1.5)  # the last redraw's image lands

            panel.scroll_into_view_if_needed()
            panel.screenshot(path=str(shot))
            page.screenshot(path=str(tmp_path / "browser_page.png"))
            # the figure for the docs: the panel from its title to the runs table (the viewer has its own)
            _save_figure(page, tmp_path / "panel-cartpole.png", panel.locator(".widget-html").first,
                         panel.locator("img.wb-curves"), panel.locator(".wb-runs"))

            # a second notebook: an env's own draw(frame, ax) and Tag in the rollout viewer
            page.goto(lab["gallery_url"], wait_until="domcontentloaded", timeout=90_000)
            _run_all(page, lab, GALLERY, failure_shot)
            outputs = _notebook(page).locator(".jp-CodeCell .jp-OutputArea")
            assert "drawn by FunctionDrawer" in outputs.nth(2).inner_text(), outputs.nth(2).inner_text()
            players = _notebook(page).locator(".wb-player")
            assert players.count() == 2
            custom, tag = players.nth(0), players.nth(1)
            for player in (custom, tag):  # each plays: the slider moves it to another frame
                first_frame = player.locator("img").get_attribute("src")
                _to_last_frame(player)
                assert player.locator("img").get_attribute("src") != first_frame
            # the cell's drawing, not the default dots: the catch radius is a pale red disc around
            # each predator (tab:red at alpha 0.15 on white), prey are tab:blue
            pixels = _frame_pixels(custom)
            assert _near(pixels, (249, 223, 223), tol=6) > 200, "no catch-radius disc in the custom drawing"
            assert _near(pixels, (31, 119, 180)) > 20, "no prey (tab:blue) in the custom drawing"
            _save_figure(page, tmp_path / "viewer-custom-draw.png", custom)
            _save_figure(page, tmp_path / "viewer-tag.png", tag)
        except Exception:
            page.screenshot(path=str(failure_shot))
            _save_artifact(failure_shot)
            raise
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    for name in ("browser.png", "browser_page.png", "panel-cartpole.png", "panel-form.png", "viewer-custom-draw.png",
                 "viewer-tag.png"):
        _save_artifact(tmp_path / name)
