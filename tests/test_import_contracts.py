"""The layering of the package, checked on every import in the tree (a function's
own imports and type-only ones included, since they are knowledge all the same):

    console  (the command line and the displays)
    batch    (many runs, reports)
    agent    (the run: controller, supervisor, worker, providers)
    tasks    (task files, evaluators, grading)
    tools    (the tools and the sandboxes they act in)
    mlra.events, mlra.durations  (the vocabulary every layer shares)

A layer imports only layers below it, and no module imports itself back through
others (no cycles between modules, so none between packages either). Inside the two
layers that hold many parts, the wings are layers too, lowest first:

    agent:   providers, metrics, notify, record, setup, loop, control, run, agents
    console: text, panes, screens, apps, cli

A wing imports only the wings below it in its layer (and any lower layer); a module
directly in a layer's folder (its `__init__`) counts as that layer's lowest wing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["console", "batch", "agent", "tasks", "tools", "shared"]
"""Highest first."""
WINGS = {
    "agent": [
        "agents",
        "run",
        "control",
        "loop",
        "setup",
        "record",
        "notify",
        "metrics",
        "providers",
    ],
    "console": ["cli", "apps", "screens", "panes", "text"],
}
"""Each layer's wings, highest first (docs/architecture.md draws them)."""


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


def _wing(module: str) -> tuple[str, int]:
    """(layer, rank of its wing: 0 is the lowest); layers without wings rank 0."""
    layer = _layer(module)
    wings = WINGS.get(layer, [])
    if module == "mlra.__main__":
        return layer, len(wings)  # the entry point stands above the command line
    parts = module.split(".")
    if len(parts) > 2 and parts[2] in wings:
        return layer, len(wings) - wings.index(parts[2])
    return layer, 0


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


def test_each_wing_imports_only_the_wings_below_it() -> None:
    broken = [
        f"{module} imports {target}"
        for module, targets in sorted(_graph().items())
        for target in sorted(targets)
        if _layer(module) == _layer(target) and _wing(target)[1] > _wing(module)[1]
    ]
    assert broken == []


def test_every_module_of_a_winged_layer_is_in_a_wing() -> None:
    """A module left beside the wings would sit outside the order the test keeps."""
    loose = [
        module
        for module in _graph()
        if _layer(module) in WINGS
        and len(module.split(".")) > 2
        and module.split(".")[2] not in WINGS[_layer(module)]
    ]
    assert loose == []


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
