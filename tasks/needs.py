"""What a task's code needs, found out rather than assumed: the modules its starter and
its evaluator import, looked up in the interpreter the task runs in, and the datasets
they would download. Read, never run: the task's .py files are parsed with `ast`
(imports and literal `load_dataset("name")` / `download=True` calls), and each
top-level module is looked up with `importlib.util.find_spec` in a child interpreter
(`python -I`: the task's folders are not on its path, so nothing of the task is
imported, and a module named like one of the task's own is not mistaken for it).

A module the evaluator lacks, or a dataset it would download with the network off
and no local copy, means this machine cannot grade the task (a run is refused before
it starts: console/needs_cli.py); the starter's are reported (the baseline's first
command would fail on them, and the agent would spend its run finding that out)."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from mlra.tasks.environment import task_python
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

FIND_SPECS = """\
import importlib.util, json, sys
out = {}
for name in json.load(sys.stdin):
    try:
        out[name] = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        out[name] = False
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Found:
    """Where a need was found: `what` (a module, `load_dataset("imdb")`) in `where`."""

    what: str
    where: str


@dataclass
class Needs:
    python: str
    """The interpreter the task runs in, where the modules were looked up."""
    starter_files: list[str] = field(default_factory=list)
    evaluator_files: list[str] = field(default_factory=list)
    """The files read (relative to the task folder); none: mlra's own evaluator, or
    a folder with no evaluator to read."""
    starter_missing: list[Found] = field(default_factory=list)
    evaluator_missing: list[Found] = field(default_factory=list)
    starter_downloads: list[Found] = field(default_factory=list)
    evaluator_downloads: list[Found] = field(default_factory=list)
    downloads_unjudged: str = ""
    """Why downloads were not judged yet (a prepare.py still to run may fetch the data)."""
    error: str = ""
    """Why the interpreter could not be asked (the modules are then not judged)."""
    environment_pending: bool = False
    """The task declares its own environment and it is not built yet: the modules were
    looked up in mlra's interpreter (which that environment is laid over), so one not
    found may still come with the environment's requirements: said, not held against it
    until the environment is built (`mlra run` builds it first, then judges again)."""

    def grading_problems(self) -> list[str]:
        """Why the evaluator cannot run here, one phrase each."""
        return self._problems(
            ("its evaluator imports", self.evaluator_missing),
            ("grading would download", self.evaluator_downloads),
        )

    def starter_problems(self) -> list[str]:
        """What the unchanged starter would fail on, one phrase each."""
        return self._problems(
            ("the starter imports", self.starter_missing),
            ("the starter downloads", self.starter_downloads),
        )

    def _problems(
        self, imports: tuple[str, list[Found]], downloads: tuple[str, list[Found]]
    ) -> list[str]:
        out = []
        if imports[1] and not self.environment_pending:
            out.append(f"{imports[0]} {_listed(imports[1])}, not installed")
        if downloads[1]:
            out.append(f"{downloads[0]} {_listed(downloads[1])} with no network and no local copy")
        return out


def _listed(found: list[Found]) -> str:
    by_what: dict[str, list[str]] = {}
    for item in found:
        by_what.setdefault(item.what, []).append(item.where)
    return ", ".join(
        f"{what} ({', '.join(dict.fromkeys(where))})" for what, where in by_what.items()
    )


def interpreter(task: TaskSpec) -> str:
    """The task's own environment's interpreter, else mlra's."""
    own = task_python(task)
    return str(own) if own is not None else sys.executable


def find_needs(task: TaskSpec, *, online: bool) -> Needs:
    """The task's missing modules and downloads, as this machine stands now; `online`:
    whether the task's commands and grader have the network (readiness.py says)."""
    python = interpreter(task)
    root = task.root
    starter_files, evaluator_files = code_files(task)
    local = local_modules(task)
    starter_imports = _imports_of(starter_files, root, local)
    evaluator_imports = _imports_of(evaluator_files, root, local)
    needs = Needs(
        python=python,
        environment_pending=task.environment.declared
        and task_python(task) is None
        and not adds_no_modules(task),
        starter_files=[_rel(p, root) for p in starter_files],
        evaluator_files=[_rel(p, root) for p in evaluator_files],
    )
    wanted = sorted({f.what for f in starter_imports + evaluator_imports})
    try:
        present = module_presence(python, tuple(wanted))
    except OSError as exc:
        needs.error = f"could not ask {python} which modules it has: {exc}"
        present = {name: True for name in wanted}
    needs.starter_missing = [f for f in starter_imports if not present.get(f.what, True)]
    needs.evaluator_missing = [f for f in evaluator_imports if not present.get(f.what, True)]
    pending = _prepare_pending(task)
    if pending:
        needs.downloads_unjudged = pending
    elif not online:
        bases = [*task.starter_paths(), root]
        needs.starter_downloads = _downloads(starter_files, root, bases)
        needs.evaluator_downloads = _downloads(evaluator_files, root, bases)
    return needs


def warm(tasks: list[TaskSpec]) -> None:
    """Every task's imports looked up at once, one child process per interpreter: a
    listing of a benchmark's folders then asks once, not once per folder."""
    by_python: dict[str, set[str]] = {}
    for task in tasks:
        starter, evaluator = code_files(task)
        found = _imports_of(starter + evaluator, task.root, local_modules(task))
        by_python.setdefault(interpreter(task), set()).update(f.what for f in found)
    for python, names in by_python.items():
        try:
            module_presence(python, tuple(sorted(names)))
        except OSError:
            continue  # said per task, where it is asked again


def adds_no_modules(task: TaskSpec) -> bool:
    """Whether the task's declared environment, laid over mlra's packages, can only pin
    packages mlra's interpreter has already (MLAgentBench's era pin `numpy<2`): then it
    brings no module mlra's interpreter lacks, and the lookups there are the verdict. A
    requirements file, or a package not installed here, may bring new ones."""
    if task.environment.files:
        return False
    for line in task.environment.requirements:
        try:
            name = Requirement(line).name
            importlib.metadata.distribution(name)
        except (InvalidRequirement, importlib.metadata.PackageNotFoundError):
            return False
    return True


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
        tree = _parse(path)
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


def _imports_of(files: list[Path], root: Path, local: set[str]) -> list[Found]:
    found: list[Found] = []
    for path in files:
        tree = _parse(path)
        if tree is None:
            continue
        where = _rel(path, root)
        for name in imported_modules(tree):
            if name not in local and name not in sys.builtin_module_names:
                found.append(Found(name, where))
    return found


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return None  # said elsewhere (grading_problem); nothing to read here


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def imported_modules(tree: ast.Module) -> list[str]:
    """The top-level modules a file imports, in order, once each: absolute imports only
    (a relative one is the folder's own), `__future__` aside, and not those under a
    `try:` whose handler catches their absence."""
    optional: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import(h) for h in node.handlers):
            for inner in node.body:
                optional.update(id(n) for n in ast.walk(inner))
    names: list[str] = []
    for node in ast.walk(tree):
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


_PRESENCE: dict[str, dict[str, bool]] = {}
"""What each interpreter was found to have, by module: a listing of many tasks asks
one child process for the names it has not asked about yet, not one per task."""


def module_presence(python: str, names: tuple[str, ...]) -> dict[str, bool]:
    """Whether `python` finds each top-level module (OSError where it cannot be asked)."""
    known = _PRESENCE.setdefault(python, {})
    unknown = [name for name in names if name not in known]
    if unknown:
        known.update(_ask(python, unknown))
    return {name: known[name] for name in names}


def _ask(python: str, names: list[str]) -> dict[str, bool]:
    try:
        proc = subprocess.run(
            [python, "-I", "-c", FIND_SPECS],
            input=json.dumps(names),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd="/",
        )
    except subprocess.TimeoutExpired:
        raise OSError("no answer in 60 s") from None
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OSError(f"exit {proc.returncode}: {tail[:200]}") from None
    return {name: bool(answer.get(name, True)) for name in names}


# --- datasets -------------------------------------------------------------------------


def _prepare_pending(task: TaskSpec) -> str:
    from mlra.tasks.foreign.loader import is_foreign, marker

    root = task.root
    if is_foreign(root) and marker(root) is None and (root / "scripts" / "prepare.py").is_file():
        return "judged once scripts/prepare.py has run (`mlra tasks prepare PATH`)"
    return ""


def _downloads(files: list[Path], root: Path, bases: list[Path]) -> list[Found]:
    found: list[Found] = []
    for path in files:
        tree = _parse(path)
        if tree is None:
            continue
        where = _rel(path, root)
        for call in ast.walk(tree):
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
