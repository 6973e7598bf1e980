"""Every notebook in notebooks/ runs top to bottom (nbclient, WORKBENCH_SMALL=1, target cpu) and is
kept in the repository without outputs.

The selected notebooks execute concurrently, WORKBENCH_NOTEBOOK_JOBS at a time (default 2: most of
a notebook's time is numba compiling on one core), each in its own kernel; every notebook is then
one test. With WORKBENCH_ARTIFACTS=DIR the executed copies are written to DIR/notebooks/.
"""
import asyncio
import json
import os
import time
import traceback
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 600


def test_the_tutorials_are_there():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_quick_start.ipynb", "03_multi_agent_tag.ipynb", "04_scaling.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} hold outputs; strip them before committing " \
                      f"(jupyter nbconvert --clear-output --inplace {path.name})"
    code = ["".join(cell["source"]) for cell in nb["cells"] if cell["cell_type"] == "code"]
    assert 'if "google.colab" in sys.modules:' in code[0] and "enable_custom_widget_manager" in code[0], \
        f"{path.name}: the first code cell must install the workbench on Colab (and only there)"
    assert "WORKBENCH_SMALL" in code[1], \
        f"{path.name}: the parameters cell (after the Colab cell) must shrink the sizes when WORKBENCH_SMALL=1"
    assert "ON_GPU" in code[1], f"{path.name}: sizes must follow the target found (full on a GPU, smaller on a CPU)"


async def _execute_all(paths, jobs, workdir):
    import nbclient
    import nbformat
    env = dict(os.environ, WORKBENCH_SMALL="1", WORKBENCH_TARGET="cpu")
    gate = asyncio.Semaphore(jobs)
    results = {}

    async def one(path):
        async with gate:
            nb = nbformat.read(path, as_version=4)
            cwd = workdir / path.stem
            cwd.mkdir(parents=True, exist_ok=True)
            client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                             resources={"metadata": {"path": str(cwd)}})
            start = time.perf_counter()
            error = None
            try:
                await client.async_execute(env=env)
            except nbclient.exceptions.CellExecutionError as exc:
                error = str(exc)
            except Exception:  # noqa: BLE001 - a kernel that died, a timeout: reported by that notebook's test
                error = traceback.format_exc()
            results[path] = (nb, error, time.perf_counter() - start)
            if os.environ.get("WORKBENCH_ARTIFACTS"):
                out = Path(os.environ["WORKBENCH_ARTIFACTS"]) / "notebooks"
                out.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, out / path.name)

    await asyncio.gather(*(one(p) for p in paths))
    return results


@pytest.fixture(scope="module")
def executed(request, tmp_path_factory):
    """{path: (executed notebook, error text or None, seconds)} of the notebooks this session selected."""
    pytest.importorskip("nbclient")
    pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    selected = [item.callspec.params["path"] for item in request.session.items
                if item.originalname == "test_notebook_runs_top_to_bottom" and hasattr(item, "callspec")]
    jobs = max(1, int(os.environ.get("WORKBENCH_NOTEBOOK_JOBS", "2")))
    return asyncio.run(_execute_all(selected or NOTEBOOKS, jobs, tmp_path_factory.mktemp("notebooks")))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, executed):
    nb, error, seconds = executed[path]
    if error is not None:
        pytest.fail(f"{path.name} failed after {seconds:.0f} s:\n{error}", pytrace=False)
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "error"]
    assert not errors, errors
    assert all(cell.execution_count for cell in nb.cells if cell.cell_type == "code"), "every code cell ran"
    print(f"{path.name}: {seconds:.1f} s")
