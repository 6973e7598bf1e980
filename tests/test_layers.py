"""The package's layers (docs/architecture.md): imports point down, no two modules import each other,
no module or class outgrows what a reader takes in, and the earlier flat module names still import."""
import ast
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# bottom to top; a module may import its own layer and those below it
LAYERS = ["errors", "extras", "compiler", "runtime", "learn", "interop", "notebook", "widgets", "cli", "__main__",
          "__init__"]
ALLOWED_UP = {("runtime", "interop")}  # Env.as_gymnasium() and siblings import their adapter when called


def modules():
    """{module name: (path, its package's parts)} for workbench/ and widgets/."""
    found = {}
    for path in list((ROOT / "workbench").rglob("*.py")) + list((ROOT / "widgets").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[0] == "widgets":
            parts = ["workbench", "widgets"] + parts[1:]
        package = parts[:-1]
        if parts[-1] == "__init__":
            parts = parts[:-1]
            package = parts
        found[".".join(parts)] = (path, package)
    return found


def imports(path, package, known):
    """The workbench modules `path` imports, lazily or not."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + (node.module.split(".") if node.module else [])) \
                if node.level else (node.module or "")
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {m for m in out if m in known}


def layer(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_imports_point_down_and_no_two_modules_import_each_other():
    known = modules()
    graph = {name: imports(path, package, known) - {name} for name, (path, package) in known.items()}
    mutual = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph.get(b, ())
                     and not a.startswith(b + ".") and not b.startswith(a + ".")})
    assert mutual == []
    upward = sorted((a, b) for a in graph for b in graph[a]
                    if layer(b) in LAYERS and layer(a) in LAYERS and LAYERS.index(layer(b)) > LAYERS.index(layer(a))
                    and layer(b) != "__init__" and (layer(a), layer(b)) not in ALLOWED_UP)
    assert upward == []


def test_no_module_over_500_lines_and_no_class_over_300():
    too_long = []
    for path, _ in modules().values():
        text = path.read_text()
        if text.count("\n") > 500:
            too_long.append((str(path.relative_to(ROOT)), text.count("\n")))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 300:
                too_long.append((f"{path.relative_to(ROOT)}:{node.name}", node.end_lineno - node.lineno + 1))
    assert too_long == []


@pytest.mark.parametrize("old,new", [("workbench.envdef", "workbench.compiler.envdef"),
                                     ("workbench.rng", "workbench.compiler.rng"),
                                     ("workbench.helpers", "workbench.compiler.helpers"),
                                     ("workbench.render", "workbench.notebook.render"),
                                     ("workbench.trainer", "workbench.learn.trainer"),
                                     ("workbench.algorithms.ppo", "workbench.learn.algorithms.ppo"),
                                     ("workbench.targets.cpu", "workbench.compiler.targets.cpu")])
def test_earlier_flat_module_names_import_the_module_in_its_layer(old, new):
    module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__.name == new and module.__package__ == new.rsplit(".", 1)[0]  # relative imports resolve
