"""What a task's code needs, found out rather than assumed: the modules its starter and
its evaluator import, looked up in the interpreter the task runs in, and the datasets
they would download. Read, never run: the task's .py files are parsed with `ast`
(tasks/code_reading.py: imports and literal `load_dataset("name")` / `download=True`
calls; tasks/network_reads.py: `requests.get`, `tfds.load`, `gs://` URLs), and each top-level module is looked up with `importlib.util.find_spec` in a
child interpreter (`python -I`: the task's folders are not on its path, so nothing of
the task is imported, and a module named like one of the task's own is not mistaken
for it).

A module the evaluator lacks, or a dataset it would download with the network off
and no local copy, means this machine cannot grade the task (a run is refused before
it starts: console/cli/needs_cli.py); the starter's are reported (the baseline's first
command would fail on them, and the agent would spend its run finding that out)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from mlra.tasks.code_reading import (
    Found,
    code_files,
    dataset_downloads,
    imports_of,
    local_modules,
    one_reading,
    relative,
)
from mlra.tasks.environment import task_python
from mlra.tasks.network_reads import network_downloads, reaching
from mlra.tasks.spec import TaskSpec

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
    starter_fetches: list[Found] = field(default_factory=list)
    evaluator_fetches: list[Found] = field(default_factory=list)
    """Downloads through a network client (`requests.get`, `tfds.load`, a `gs://` URL:
    tasks/network_reads.py): notes only (`fetch_notes`), never a problem, since a static
    reading cannot tell a fetch with a local fallback, a guard on a file the task ships,
    a local server's URL built at run time or an unused helper from a real download."""
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

    def fetch_notes(self) -> list[str]:
        """What the code may download through a network client, worded as possible, not
        certain: said beside "ready", never a reason to refuse a run (see the field)."""
        out = []
        if self.evaluator_fetches:
            out.append(
                f"its grading code {reaching(self.evaluator_fetches)}: "
                f"{listed(self.evaluator_fetches)}; "
                "with no network its grading may fail"
            )
        if self.starter_fetches:
            out.append(
                f"its starter {reaching(self.starter_fetches)}: {listed(self.starter_fetches)}; "
                "with no network its first run may fail"
            )
        return out

    def _problems(
        self, imports: tuple[str, list[Found]], downloads: tuple[str, list[Found]]
    ) -> list[str]:
        out = []
        if imports[1] and not self.environment_pending:
            out.append(f"{imports[0]} {listed(imports[1])}, not installed")
        if downloads[1]:
            out.append(f"{downloads[0]} {listed(downloads[1])} with no network and no local copy")
        return out


LISTED = 5
"""How many distinct modules or downloads a line names before "and N more"."""


def listed(found: list[Found]) -> str:
    """Each module (or download) once, with the first file that names it and how many
    more do: MLAgentBench's CLRS imports jax in 15 files, and a line naming each pair
    ran to 2,000 characters ("jax (env/a.py), jax (env/b.py), ..."); the first LISTED,
    then how many more (200 distinct `s3://` strings made an 8,000-character line)."""
    by_what: dict[str, list[str]] = {}
    for item in found:
        by_what.setdefault(item.what, []).append(item.where)
    shown = [f"{what} ({_files(where)})" for what, where in by_what.items()]
    more = len(shown) - LISTED
    return ", ".join(shown[:LISTED]) + (f" and {more} more" if more > 0 else "")


def _files(where: list[str]) -> str:
    files = list(dict.fromkeys(where))
    if len(files) <= 2:
        return ", ".join(files)
    return f"{files[0]} and {len(files) - 1} more files"


def interpreter(task: TaskSpec) -> str:
    """The task's own environment's interpreter, else mlra's."""
    own = task_python(task)
    return str(own) if own is not None else sys.executable


def find_needs(task: TaskSpec, *, online: bool) -> Needs:
    """The task's missing modules and downloads, as this machine stands now; `online`:
    whether the task's commands and grader have the network (readiness.py says)."""
    python = interpreter(task)
    root = task.root
    pending = _prepare_pending(task)
    bases = None if pending or online else [*task.starter_paths(), root]
    with one_reading():
        starter_files, evaluator_files = code_files(task)  # the grader's files parsed
        local = local_modules(task)
        evaluator_imports, evaluator_loads, evaluator_fetches = _read(
            evaluator_files, root, local, bases
        )
        starter_imports, starter_loads, starter_fetches = _read(starter_files, root, local, bases)
    needs = Needs(
        python=python,
        environment_pending=task.environment.declared
        and task_python(task) is None
        and not adds_no_modules(task),
        starter_files=[relative(p, root) for p in starter_files],
        evaluator_files=[relative(p, root) for p in evaluator_files],
    )
    wanted = sorted({f.what for f in starter_imports + evaluator_imports})
    try:
        present = module_presence(python, tuple(wanted))
    except OSError as exc:
        needs.error = f"could not ask {python} which modules it has: {exc}"
        present = {name: True for name in wanted}
    needs.starter_missing = [f for f in starter_imports if not present.get(f.what, True)]
    needs.evaluator_missing = [f for f in evaluator_imports if not present.get(f.what, True)]
    if pending:
        needs.downloads_unjudged = pending
    elif not online:
        needs.starter_downloads = starter_loads
        needs.evaluator_downloads = evaluator_loads
        needs.starter_fetches = starter_fetches
        needs.evaluator_fetches = evaluator_fetches
    return needs


def _read(
    files: list[Path], root: Path, local: set[str], bases: list[Path] | None
) -> tuple[list[Found], list[Found], list[Found]]:
    """`files`' imports and, where `bases` is given (downloads are judged), their dataset
    loads and network fetches: every reader over one file, then the next, so the file's
    tree is still held when each asks for it (code_reading.py `one_reading` keeps the
    last file read and the grader's files, no other)."""
    imports: list[Found] = []
    loads: list[Found] = []
    fetches: list[Found] = []
    for path in files:
        imports += imports_of([path], root, local)
        if bases is not None:
            loads += dataset_downloads([path], root, bases)
            fetches += network_downloads([path], root, bases)
    return imports, loads, fetches


def warm(tasks: list[TaskSpec]) -> None:
    """Every task's imports looked up at once, one child process per interpreter: a
    listing of a benchmark's folders then asks once, not once per folder."""
    by_python: dict[str, set[str]] = {}
    for task in tasks:
        with one_reading():  # the grader's files, parsed to find them, read once
            starter, evaluator = code_files(task)
            found = imports_of(evaluator + starter, task.root, local_modules(task))
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


def _prepare_pending(task: TaskSpec) -> str:
    from mlra.tasks.foreign.loader import is_foreign, marker

    root = task.root
    if is_foreign(root) and marker(root) is None and (root / "scripts" / "prepare.py").is_file():
        return "judged once scripts/prepare.py has run (`mlra tasks prepare PATH`)"
    return ""
