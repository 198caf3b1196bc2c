"""The layering of the package, checked on every import in the tree (a function's
own imports and type-only ones included, since they are knowledge all the same):

    console  (the command line and the displays)
    batch    (many runs, reports)
    agent    (the run: controller, supervisor, worker, providers)
    tasks    (task files, evaluators, grading)
    tools    (the tools and the sandboxes they act in)
    mlra.events, mlra.durations  (the vocabulary every layer shares)

A layer imports only layers below it, and no module imports itself back through
others (no cycles between modules, so none between packages either).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["console", "batch", "agent", "tasks", "tools", "shared"]
"""Highest first."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    """Every module of the package, by its dotted name (task folders' own scripts aside)."""
    found: dict[str, Path] = {}
    for path in sorted((ROOT / "mlra").rglob("*.py")):
        if path.relative_to(ROOT).parts[:3] == ("mlra", "tasks", "builtin"):
            continue  # a task folder's starter, hidden and build scripts are not mlra
        found[_module_name(path)] = path
    return found


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The mlra modules `path` imports, wherever the import statement stands."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = (package or _module_name(path)).split(".")
                base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                names.add(full if full in modules else base)
    resolved = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            resolved.add(name)
    return resolved


def _layer(module: str) -> str:
    if module == "mlra.__main__":  # `python -m mlra`: the command line's entry point
        return "console"
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return "shared"


def _graph() -> dict[str, set[str]]:
    sources = _sources()
    modules = set(sources)
    return {name: _imports(path, modules) - {name} for name, path in sources.items()}


def test_each_layer_imports_only_the_layers_below_it() -> None:
    broken = [
        f"{module} imports {target}"
        for module, targets in sorted(_graph().items())
        for target in sorted(targets)
        if LAYERS.index(_layer(target)) < LAYERS.index(_layer(module))
    ]
    assert broken == []


def test_no_module_imports_itself_back() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert cycles == []


def test_the_check_sees_the_whole_package() -> None:
    """A contract over too few modules would pass whatever the code does."""
    graph = _graph()
    assert {"mlra.events", "mlra.agent.run.controller", "mlra.console.cli.cli"} <= set(graph)
    assert "mlra.events" in graph["mlra.agent.run.controller"]
    assert len(graph) > 80
