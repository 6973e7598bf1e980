"""README's notebook table and each notebook's Colab cell, written from the one repository URL.

    python bench/notebook_links.py           # rewrite them from pyproject.toml's [project.urls]
    python bench/notebook_links.py --check   # exit 1, naming the files, when they differ from that

The URL lives in one place: `Repository` in pyproject.toml's [project.urls]. With a github.com URL
there, README's table gets an "Open in Colab" badge per notebook and each notebook's first cell
installs the workbench from that URL on Colab. Without one (until the project has a public
address) the table has no badges, since a badge could not open, and the cell installs from
WORKBENCH_REPO, a variable in the cell that the user sets; left empty, the cell stops with a
message saying so. The table lists every notebooks/*.ipynb with its title (its first heading).
tests/test_notebook_links.py runs the check.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- notebook table: written by bench/notebook_links.py from pyproject.toml's [project.urls] -->"
END = "<!-- end of notebook table -->"
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
EXTRAS = {"05_lightning": ("lightning", "lightning")}  # notebook: (the extra it needs, a module the extra brings)
BRANCH = "main"

CELL = '''\
# On Colab only: install the workbench and enable the widget manager (elsewhere this cell does nothing).
# WORKBENCH_REPO: the git URL Colab installs warp-workbench from (append @branch or @commit to pin one).
WORKBENCH_REPO = {url}
import importlib.util
import sys

if "google.colab" in sys.modules:
    if {missing}:
        if not WORKBENCH_REPO:
            raise RuntimeError("set WORKBENCH_REPO in this cell to the https URL of a git repository holding "
                               "warp-workbench (your fork or copy of it), then run the cell again")
        get_ipython().run_line_magic("pip", f"install -q 'warp-workbench{extra} @ git+{{WORKBENCH_REPO}}'")
    from google.colab import output
    output.enable_custom_widget_manager()'''


def repository_url(root: Path = ROOT) -> str:
    """`Repository` of pyproject.toml's [project.urls], or '' when there is none."""
    text = (root / "pyproject.toml").read_text()
    try:
        import tomllib
        urls = tomllib.loads(text).get("project", {}).get("urls", {})
    except ModuleNotFoundError:  # Python 3.10: read the one table by hand
        block = re.search(r"^\[project\.urls\]\s*\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
        urls = dict(re.findall(r'^\s*"?([\w .-]+?)"?\s*=\s*"([^"]*)"', block.group(1), re.M)) if block else {}
    return urls.get("Repository", "").strip().rstrip("/")


def github_path(url: str) -> str | None:
    """'owner/name' of a github.com URL, else None (Colab opens notebooks from GitHub only)."""
    match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?", url)
    return match.group(1) if match else None


def notebooks(root: Path = ROOT) -> list:
    return sorted((root / "notebooks").glob("*.ipynb"))


def title(nb: dict) -> str:
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


def table(root: Path, url: str) -> str:
    repo = github_path(url)
    rows = ["| notebook | about | Colab |", "|---|---|---|"] if repo else ["| notebook | about |", "|---|---|"]
    for path in notebooks(root):
        rel = f"notebooks/{path.name}"
        row = f"| [{path.stem}]({rel}) | {title(json.loads(path.read_text()))} |"
        if repo:
            colab = f"https://colab.research.google.com/github/{repo}/blob/{BRANCH}/{rel}"
            row += f" [![Open in Colab]({BADGE})]({colab}) |"
        rows.append(row)
    return "\n".join([BEGIN, "", *rows, "", END])


def readme(root: Path, url: str) -> str:
    text = (root / "README.md").read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"README.md must hold the notebook table between exactly one {BEGIN!r} and one {END!r}")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return head + table(root, url) + tail


def colab_cell(path: Path, url: str) -> str:
    if path.stem in EXTRAS:
        extra, module = EXTRAS[path.stem]
        missing = f'any(importlib.util.find_spec(name) is None for name in ("workbench", "{module}"))'
        return CELL.format(url=json.dumps(url), extra=f"[{extra}]", missing=missing)
    return CELL.format(url=json.dumps(url), extra="", missing='importlib.util.find_spec("workbench") is None')


def notebook(path: Path, url: str) -> str:
    nb = json.loads(path.read_text())
    first = next(cell for cell in nb["cells"] if cell["cell_type"] == "code")
    first["source"] = colab_cell(path, url).splitlines(keepends=True)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def expected(root: Path = ROOT) -> dict:
    """{path: the text this script writes there}."""
    url = repository_url(root)
    files = {root / "README.md": readme(root, url)}
    files.update({path: notebook(path, url) for path in notebooks(root)})
    return files


def differing(root: Path = ROOT) -> list:
    """The files that differ from what this script writes."""
    return [path for path, text in expected(root).items() if path.read_text() != text]


def write(root: Path = ROOT) -> list:
    """Rewrites the files that differ; returns them."""
    changed = differing(root)
    files = expected(root)
    for path in changed:
        path.write_text(files[path])
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="only report the files that differ (exit 1 if any)")
    args = parser.parse_args(argv)
    if args.check:
        stale = differing()
        for path in stale:
            print(f"{path.relative_to(ROOT)} differs from pyproject.toml's [project.urls]: "
                  f"run python bench/notebook_links.py", file=sys.stderr)
        return 1 if stale else 0
    for path in write():
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
