"""The package's imports point one way: no cycles, nothing up the layer order.

The layer order is the one drawn in docs/architecture.md; this test reads the source
with ``ast`` (no import runs), so it sees function-local and ``TYPE_CHECKING`` imports
too, and imports by a constant string (``importlib.import_module("torchgarden.x")``,
``__import__(...)``). A module named by data at run time (a config's ``_type``) is not
an import of the code that reads it.
"""

from __future__ import annotations

import ast
import pathlib
import re

SRC = pathlib.Path(__file__).resolve().parents[3] / "src"
PACKAGE = SRC / "torchgarden"
DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "architecture.md"

#: Lowest first. A module may import modules of its own layer or of layers below it.
LAYERS: list[set[str]] = [
    {"utils"},
    {"config", "modes"},
    {"layers", "metrics", "losses", "data", "optim", "summary", "checkpoint", "callbacks",
     "distribute", "vision", "models", "text"},
    {"runtime"},
    {"core"},
    {"compile", "loop"},
    {"registry"},
    {"multitask"},
    {"experiments", "tasks"},
    {"export", "report"},
    {"train_lib"},
    {"tune"},
    {"cli"},
    {"__init__", "__main__"},
]


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _string_import(node: ast.Call) -> str | None:
    """``"torchgarden.x"`` of ``importlib.import_module("torchgarden.x")``,
    ``import_module(...)`` or ``__import__(...)``; None for any other call."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def _imports(path: pathlib.Path, known: set[str], own: str) -> set[str]:
    """Every torchgarden module ``path`` imports (resolved to modules, not packages,
    where the imported name is a submodule)."""
    found: set[str] = set()
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            target = _string_import(node)
            if target is not None and target.split(".")[0] == "torchgarden":
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "torchgarden")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([node.module] if node.module else []))
            if base.split(".")[0] != "torchgarden":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {name for name in found if name in known and name != own}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, known, name) for name, path in modules.items()}


def _layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    for index, layer in enumerate(LAYERS):
        if top in layer:
            return index
    raise AssertionError(f"{module} is in no layer; add '{top}' to LAYERS and the doc.")


def test_every_module_has_a_layer():
    for module in _graph():
        _layer(module)


def test_no_import_points_up_the_layer_order():
    upward = [
        f"{module} -> {target}"
        for module, targets in sorted(_graph().items())
        for target in sorted(targets)
        if _layer(target) > _layer(module)
    ]
    assert not upward, "imports pointing up the layer order:\n" + "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _without_parent_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` re-exporting its own submodules is not a cycle with them."""
    return {
        module: {t for t in targets if not module.startswith(t + ".")}
        for module, targets in graph.items()
    }


def test_there_are_no_import_cycles():
    cycles = _cycles(_without_parent_packages(_graph()))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_a_planted_string_import_is_seen(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import importlib\n"
        "from importlib import import_module\n"
        "def load(name):\n"
        "    importlib.import_module('torchgarden.tasks')\n"
        "    import_module('torchgarden.experiments.toy')\n"
        "    __import__('torchgarden.cli')\n"
        "    importlib.import_module(name)  # Data, not a literal: not an import.\n"
        "    importlib.import_module('numpy')\n",
        encoding="utf-8",
    )
    found = _imports(planted, set(_modules()), "torchgarden.registry")
    assert found == {"torchgarden.tasks", "torchgarden.experiments.toy", "torchgarden.cli"}


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"x.a": {"x.b"}, "x.b": {"x.c"}, "x.c": {"x.a"}, "x.d": set()}
    assert _cycles(graph) == [["x.a", "x.b", "x.c"]]


def test_the_architecture_page_lists_the_same_layers():
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- layers -->\n(.*?)<!-- /layers -->", text, re.S)
    assert block, "docs/architecture.md needs the <!-- layers --> block"
    documented = [set(re.findall(r"`([a-z_]+)`", line.split("—")[0]))
                  for line in block.group(1).splitlines()
                  if line.strip().startswith(tuple("0123456789"))]
    assert documented == LAYERS


def test_nothing_private_crosses_packages():
    """``torchgarden.<pkg>._private`` is imported only from inside ``<pkg>``."""
    crossing = []
    for module, targets in sorted(_graph().items()):
        for target in sorted(targets):
            parts = target.split(".")
            private = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
            if private is None:
                continue
            owner = ".".join(parts[:private])
            if not (module == owner or module.startswith(owner + ".")):
                crossing.append(f"{module} -> {target}")
    assert not crossing, "private modules imported from other packages:\n" + "\n".join(crossing)
