"""A task's code read, never run: which files are its starter's and its evaluator's, the
modules they import and the datasets they would download.

The .py files are parsed with `ast`: imports (an import inside `try:` that handles its
absence is optional, not a need) and literal `load_dataset("name")` / `download=True`
calls, a dataset counted as present where a local folder or the Hugging Face cache holds
it. Whether an interpreter has the modules, and what the task then cannot do here, is
tasks/needs.py's to judge.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from mlra.tasks.spec import TaskSpec

PACKAGED_BUILDERS = {
    "arrow",
    "audiofolder",
    "csv",
    "generator",
    "imagefolder",
    "json",
    "pandas",
    "parquet",
    "sql",
    "text",
    "videofolder",
    "webdataset",
    "xml",
}
"""`load_dataset` names that read local files (`load_dataset("csv", data_files=...)`)."""

OPTIONAL_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
"""An import inside `try:` with one of these handlers is optional: its absence is handled."""


@dataclass(frozen=True)
class Found:
    """Where a need was found: `what` (a module, `load_dataset("imdb")`) in `where`."""

    what: str
    where: str
    sends: bool = False
    """A network call that sends (`requests.post`, a PUT) rather than fetches: said as
    calling the network, not as downloading (tasks/network_reads.py `reaching`)."""


def code_files(task: TaskSpec) -> tuple[list[Path], list[Path]]:
    """The starter's and the evaluator's .py files. The starter: the top level of each
    starter folder (and starter files named alone; MLRC-Bench's `methods/` too). The
    evaluator: what grading runs, followed through the folder's own modules it imports
    as far as they are the grader's (hidden, or read-only starter files grading puts
    back): the evaluator script where it is the task's own file, MLAgentBench's
    `scripts/eval.py`, MLRC-Bench's `main.py` (its test phase) and test constants. Not
    prepare.py, which runs once host-side with mlra's interpreter, nor a hidden helper
    nothing of the grader imports."""
    from mlra.tasks.foreign.loader import detect

    root = task.root
    layout = detect(root)
    starter: list[Path] = []
    for path in task.starter_paths():
        if path.is_dir():
            starter += sorted(p for p in path.glob("*.py") if p.is_file())
            if (path / "methods").is_dir() and layout == "mlrcbench":
                starter += sorted(p for p in (path / "methods").glob("*.py") if p.is_file())
        elif path.suffix == ".py" and path.is_file():
            starter.append(path)
    roots: list[Path] = []
    script = task.evaluator.settings.get("script")
    if task.evaluator.kind == "script" and isinstance(script, str):
        path = (root / script).resolve()
        if path.is_file() and root.resolve() in path.parents:  # not mlra's own driver
            roots.append(path)
    if layout == "mlagentbench":
        roots.append(root / "scripts" / "eval.py")
    elif layout == "mlrcbench":
        roots += [root / "env" / "main.py", root / "scripts" / "test_constants.py"]
    evaluator = _grader_closure(task, [p for p in roots if p.is_file()])
    graded = {p.resolve() for p in evaluator}
    return [p for p in starter if p.resolve() not in graded], evaluator


def _grader_closure(task: TaskSpec, roots: list[Path]) -> list[Path]:
    """`roots` and the task's own modules they import, transitively, where those are the
    grader's files: hidden ones, the evaluator script's folder, read-only starter files."""
    root = task.root.resolve()
    hidden = [p.resolve() for p in task.hidden_paths()]
    script = task.evaluator.settings.get("script")
    if isinstance(script, str) and (root / script).resolve().is_file():
        hidden.append((root / script).resolve().parent)
    read_only = {source.resolve() for source in task.read_only_originals().values()}
    places = [*hidden, *(p.resolve() for p in task.starter_paths() if p.is_dir()), root]

    def graders(path: Path) -> bool:
        path = path.resolve()
        return path in read_only or any(h == path or h in path.parents for h in hidden)

    seen: list[Path] = []
    todo = list(roots)
    while todo:
        path = todo.pop(0).resolve()
        if path in seen:
            continue
        seen.append(path)
        tree = parse(path, graders=True)
        if tree is None:
            continue
        for name in imported_modules(tree):
            for folder in [path.parent, *places]:
                for found in _module_files(folder, name):
                    if graders(found) and found.resolve() not in seen:
                        todo.append(found)
    return seen


def _module_files(folder: Path, name: str) -> list[Path]:
    if (folder / f"{name}.py").is_file():
        return [folder / f"{name}.py"]
    if (folder / name).is_dir():
        return sorted(p for p in (folder / name).glob("*.py") if p.is_file())
    return []


def local_modules(task: TaskSpec) -> set[str]:
    """Modules the task's own folders provide: the top-level .py files and packages of
    the task folder, its starter and hidden folders and the evaluator script's folder
    (MLRC-Bench's starter also gets mlra's stand-in for the MLAgentBench package)."""
    from mlra.tasks.foreign.loader import detect

    folders = [task.root, *task.starter_paths(), *task.hidden_paths()]
    script = task.evaluator.settings.get("script")
    if isinstance(script, str):
        folders.append((task.root / script).resolve().parent)
    names: set[str] = {"MLAgentBench"} if detect(task.root) == "mlrcbench" else set()
    for folder in folders:
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.suffix in (".py", ".so", ".pyd") and entry.is_file():
                names.add(entry.name.split(".")[0])
            elif entry.is_dir() and entry.name.isidentifier():
                names.add(entry.name)  # a package, or a namespace package
    return names


def imports_of(files: list[Path], root: Path, local: set[str]) -> list[Found]:
    found: list[Found] = []
    for path in files:
        tree = parse(path)
        if tree is None:
            continue
        where = relative(path, root)
        for name in imported_modules(tree):
            if name not in local and name not in sys.builtin_module_names:
                found.append(Found(name, where))
    return found


KEPT_SOURCE_BYTES = 1_000_000
"""How much source the grader's trees one reading keeps may come from: a tree and its
node list take about 115 times their source's bytes (a 4 MB bound held some 460 MB)."""

_reading: ContextVar[_Parses | None] = ContextVar("mlra_task_reading", default=None)

_Key = tuple[str, int, int]


class _Parses:
    """The trees one reading keeps, by file (its path, mtime and size, so a file changed
    meanwhile is parsed again; None for one that does not parse): only those read again.
    The grader's files, parsed first to find which they are (`code_files`) and read
    after, up to KEPT_SOURCE_BYTES of their source; and the last file read, which the
    readers go over in turn before the next (tasks/needs.py `_read`). Keeping every
    tree up to a bound kept starter trees never read again. With each tree, its nodes
    in `ast.walk`'s order: the readers walk a whole tree about eight times a file, and
    those walks cost several times the parse."""

    def __init__(self) -> None:
        self.graders: dict[_Key, ast.Module | None] = {}
        self.graders_source = 0
        self.last: tuple[_Key, ast.Module | None] | None = None
        self.nodes: dict[int, list[ast.AST]] = {}

    def tree(self, path: Path, *, graders: bool = False) -> ast.Module | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
        if key in self.graders:
            return self.graders[key]
        if self.last is not None and self.last[0] == key:
            return self.last[1]
        if self.last is not None:  # dropped before the next parse: one tree held, not two
            self.nodes.pop(id(self.last[1]), None)
            self.last = None
        tree = _parsed(path)
        if tree is not None:
            self.nodes[id(tree)] = list(ast.walk(tree))
        if graders and self.graders_source + stat.st_size <= KEPT_SOURCE_BYTES:
            self.graders[key] = tree
            self.graders_source += stat.st_size
        else:
            self.last = (key, tree)
        return tree

    def kept(self) -> list[str]:
        """The files whose trees are held now, by path."""
        held = [key[0] for key in self.graders]
        return held + ([self.last[0][0]] if self.last is not None else [])


@contextmanager
def one_reading() -> Iterator[None]:
    """Within it, each of the task's files is parsed and walked once, whichever reader
    asks for it (imports, dataset loads, tasks/network_reads.py's fetches, the grader's
    imports; `parse`, `every_node`): each parsed and walked every file again, and on
    500 large modules `mlra tasks show` took 578 s where it had taken 210 s before a
    reader was added. Nothing is kept after it, so a long-running console reads a file
    changed since afresh and holds no trees; a reading inside another shares the outer
    one's."""
    if _reading.get() is not None:
        yield
        return
    token = _reading.set(_Parses())
    try:
        yield
    finally:
        _reading.reset(token)


def parse(path: Path, *, graders: bool = False) -> ast.Module | None:
    """`path`'s tree, or None where it does not parse; shared within `one_reading`
    (`graders`: one of the grader's files, kept there to be read again)."""
    parses = _reading.get()
    return _parsed(path) if parses is None else parses.tree(path, graders=graders)


def every_node(tree: ast.AST) -> Iterable[ast.AST]:
    """`ast.walk(tree)`, walked once for a tree `parse` gave within `one_reading`."""
    parses = _reading.get()
    nodes = parses.nodes.get(id(tree)) if parses is not None else None
    return nodes if nodes is not None and nodes[0] is tree else ast.walk(tree)


def _parsed(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):  # `x = ----...1`
        return None  # said elsewhere (grading_problem); nothing to read here


def relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def imported_modules(tree: ast.Module) -> list[str]:
    """The top-level modules a file imports, in order, once each: absolute imports only
    (a relative one is the folder's own), `__future__` aside, and not those under a
    `try:` whose handler catches their absence."""
    optional: set[int] = set()
    for node in every_node(tree):
        if isinstance(node, ast.Try) and any(_catches_import(h) for h in node.handlers):
            for inner in node.body:
                optional.update(id(n) for n in ast.walk(inner))
    names: list[str] = []
    for node in every_node(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".")[0])
    return [n for n in dict.fromkeys(names) if n and n != "__future__"]


def _catches_import(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(k, ast.Name) and k.id in OPTIONAL_IMPORT_ERRORS for k in kinds)


def dataset_downloads(files: list[Path], root: Path, bases: list[Path]) -> list[Found]:
    found: list[Found] = []
    for path in files:
        tree = parse(path)
        if tree is None:
            continue
        where = relative(path, root)
        for call in every_node(tree):
            if not isinstance(call, ast.Call):
                continue
            name = _called(call)
            if name == "load_dataset":
                dataset = _literal(call, 0, "path")
                if dataset is not None and not _local_dataset(dataset, [path.parent, *bases]):
                    found.append(Found(f'load_dataset("{dataset}")', where))
            elif any(
                k.arg == "download" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in call.keywords
            ):
                folder = _literal(call, 0, "root")
                if folder is not None and not _has_files(folder, [path.parent, *bases]):
                    found.append(
                        Found(f'{name or "a dataset"}(root="{folder}", download=True)', where)
                    )
    return found


def _called(call: ast.Call) -> str:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return ""


def _literal(call: ast.Call, position: int, keyword: str) -> str | None:
    for k in call.keywords:
        if k.arg == keyword:
            return (
                k.value.value
                if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)
                else None
            )
    if len(call.args) > position:
        arg = call.args[position]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
    return None


def _has_files(folder: str, bases: list[Path]) -> bool:
    for base in bases:
        candidate = base / folder if not os.path.isabs(folder) else Path(folder)
        if candidate.is_file():
            return True
        if candidate.is_dir() and any(p.is_file() for p in candidate.rglob("*")):
            return True
    return False


def _local_dataset(name: str, bases: list[Path]) -> bool:
    """A builder that reads local files, a local folder, or a copy in the Hugging Face
    caches the grader is shown (HF_HOME, HF_DATASETS_CACHE, ~/.cache/huggingface)."""
    if name in PACKAGED_BUILDERS or name.startswith((".", "/", "~")):
        return True
    if any((base / name).exists() for base in bases):
        return True
    return any(_cached(name, cache) for cache in hf_caches())


def hf_caches() -> list[Path]:
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface").expanduser()
    caches = [home / "datasets", home / "hub"]
    for var in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            caches.append(Path(os.environ[var]).expanduser())
    return [c for c in dict.fromkeys(caches) if c.is_dir()]


def _cached(name: str, cache: Path) -> bool:
    """`name` (`imdb`, `stanfordnlp/imdb`) in a datasets cache (`imdb/`,
    `stanfordnlp___imdb/`) or a hub cache (`datasets--stanfordnlp--imdb/`)."""
    if "/" in name:
        owner, _, short = name.partition("/")
        patterns = [f"{owner}___{short}", f"datasets--{owner}--{short}"]
    else:
        patterns = [name, f"*___{name}", f"datasets--{name}", f"datasets--*--{name}"]
    for pattern in patterns:
        for hit in cache.glob(pattern):
            if hit.is_dir() and any(p.is_file() for p in hit.rglob("*")):
                return True
    return False
