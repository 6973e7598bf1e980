"""bench/notebook_links.py: README's notebook table and the notebooks' Colab cells follow the one
repository URL in pyproject.toml's [project.urls]; without one nothing links to a placeholder."""
import importlib.util
import json
import shutil
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("notebook_links", ROOT / "bench" / "notebook_links.py")
links = importlib.util.module_from_spec(spec)
spec.loader.exec_module(links)
FIND_SPEC = importlib.util.find_spec


def test_readme_and_notebooks_follow_pyproject():
    stale = [str(p.relative_to(ROOT)) for p in links.differing()]
    assert not stale, f"{stale} differ from pyproject.toml's [project.urls]: run python bench/notebook_links.py"


def test_no_placeholder_address_anywhere():
    for path in [ROOT / "README.md", *links.notebooks()]:
        assert "github.com/OWNER" not in path.read_text(), path.name


def copy_of_repo(tmp_path, url=None):
    (tmp_path / "notebooks").mkdir()
    for path in links.notebooks():
        shutil.copy(path, tmp_path / "notebooks" / path.name)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    urls = f'Repository = "{url}"\n' if url else "# none yet\n"
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "warp-workbench"\n\n[project.urls]\n{urls}\n'
                                             '[project.scripts]\nwarp-workbench = "workbench.cli:main"\n')
    links.write(tmp_path)
    assert links.differing(tmp_path) == []
    return tmp_path


def colab_cell(path):
    nb = json.loads(path.read_text())
    return "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])


class FakeShell:
    def __init__(self):
        self.magics = []

    def run_line_magic(self, name, line):
        self.magics.append((name, line))


def run_cell(source, monkeypatch, *, on_colab=True, installed=False):
    """Runs a Colab cell as Colab would; returns the line magics it ran and whether it enabled widgets."""
    enabled = []
    colab = types.ModuleType("google.colab")
    colab.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: enabled.append(True))
    if on_colab:
        monkeypatch.setitem(sys.modules, "google.colab", colab)
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: FIND_SPEC(name, *a) if installed else None)
    shell = FakeShell()
    exec(compile(source, "<colab cell>", "exec"), {"get_ipython": lambda: shell})
    return shell.magics, bool(enabled)


def test_without_a_url_no_badges_and_the_cell_asks_for_one(tmp_path, monkeypatch):
    repo = copy_of_repo(tmp_path)
    readme = (repo / "README.md").read_text()
    assert "colab.research.google.com" not in readme
    for path in links.notebooks(repo):
        assert f"| [{path.stem}](notebooks/{path.name}) | {links.title(json.loads(path.read_text()))} |" in readme
    assert "[05_lightning](notebooks/05_lightning.ipynb)" in readme

    source = colab_cell(repo / "notebooks" / "01_quick_start.ipynb")
    assert 'WORKBENCH_REPO = ""' in source
    with pytest.raises(RuntimeError, match="set WORKBENCH_REPO in this cell"):
        run_cell(source, monkeypatch)
    assert run_cell(source, monkeypatch, installed=True) == ([], True)  # already installed: nothing to set
    assert run_cell(source, monkeypatch, on_colab=False) == ([], False)  # elsewhere the cell does nothing

    given = source.replace('WORKBENCH_REPO = ""', 'WORKBENCH_REPO = "https://example.org/me/warp-workbench.git"')
    assert run_cell(given, monkeypatch) == (
        [("pip", "install -q 'warp-workbench @ git+https://example.org/me/warp-workbench.git'")], True)
    lightning = colab_cell(repo / "notebooks" / "05_lightning.ipynb").replace(
        'WORKBENCH_REPO = ""', 'WORKBENCH_REPO = "https://example.org/me/warp-workbench.git"')
    assert run_cell(lightning, monkeypatch)[0] == [
        ("pip", "install -q 'warp-workbench[lightning] @ git+https://example.org/me/warp-workbench.git'")]


def test_a_github_url_gives_badges_and_fills_every_cell(tmp_path, monkeypatch):
    repo = copy_of_repo(tmp_path, "https://github.com/someone/warp-workbench")
    readme = (repo / "README.md").read_text()
    for path in links.notebooks(repo):
        assert (f"(https://colab.research.google.com/github/someone/warp-workbench/blob/main/notebooks/{path.name})"
                in readme)
        source = colab_cell(path)
        assert 'WORKBENCH_REPO = "https://github.com/someone/warp-workbench"' in source
        assert run_cell(source, monkeypatch)[0][0][1].endswith(" @ git+https://github.com/someone/warp-workbench'")


def test_a_url_elsewhere_fills_the_cells_without_badges(tmp_path):
    repo = copy_of_repo(tmp_path, "https://git.example.org/warp-workbench.git")
    assert "colab.research.google.com" not in (repo / "README.md").read_text()
    assert 'WORKBENCH_REPO = "https://git.example.org/warp-workbench.git"' in colab_cell(
        repo / "notebooks" / "02_write_an_env.ipynb")


def test_check_names_the_files_that_disagree(tmp_path):
    repo = copy_of_repo(tmp_path)
    notebook = repo / "notebooks" / "03_multi_agent_tag.ipynb"
    notebook.write_text(notebook.read_text().replace('WORKBENCH_REPO = \\"\\"', 'WORKBENCH_REPO = \\"x\\"'))
    readme = repo / "README.md"
    readme.write_text(readme.read_text().replace("| [05_lightning](notebooks/05_lightning.ipynb)", "| [05]"))
    assert links.differing(repo) == [readme, notebook]
    (repo / "pyproject.toml").write_text((repo / "pyproject.toml").read_text().replace(
        "# none yet", 'Repository = "https://github.com/someone/warp-workbench"'))
    assert len(links.differing(repo)) == 1 + len(links.notebooks(repo))
