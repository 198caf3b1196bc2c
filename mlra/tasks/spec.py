"""Tasks as data: a built-in task's `tasks/builtin/<name>/task.toml`, or any
folder's `task.toml`, and the files beside it.

A task says what the agent is asked (the prompt, in the ML Research Benchmark's
sections), which files it starts with, which files it must never see, how the
result is graded (metric, evaluator, reference scores) and what it needs to run.
A malformed file is refused with the file, the field and what is wrong.

Here: the TaskSpec that holds a task's sections (each in tasks/sections.py), and
loading, checking and finding a task; so the loader reads as one thing.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import Field, ValidationError

from mlra.durations import format_duration, parse_duration
from mlra.tasks import checks
from mlra.tasks.challenge import Challenge, challenge_problems, prompt_section
from mlra.tasks.constraints import Constraints
from mlra.tasks.sections import (
    Baseline,
    EnvironmentSettings,
    Evaluator,
    Files,
    Metric,
    Prompt,
    Resources,
    SandboxSettings,
    StrictModel,
    ValidationSettings,
)
from mlra.tasks.starter import starter_source, workspace_relative

BUILTIN_TASKS_DIR = Path(__file__).resolve().parent / "builtin"
"""The built-in tasks, one folder each (task.toml, starter/, hidden/, data), kept apart
from the code that reads, checks and grades them, so `tasks/` shows which is which."""


class TaskError(Exception):
    """A task that cannot be loaded; the message names the file and the field."""


class TaskSpec(StrictModel):
    name: str
    title: str
    description: str = ""
    prompt: Prompt
    files: Files = Field(default_factory=Files)
    metric: Metric
    evaluator: Evaluator
    resources: Resources = Field(default_factory=Resources)
    baseline: Baseline = Field(default_factory=Baseline)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    environment: EnvironmentSettings = Field(default_factory=EnvironmentSettings)
    validation: ValidationSettings = Field(default_factory=ValidationSettings)
    constraints: Constraints = Field(default_factory=Constraints)
    challenge: Challenge = Field(default_factory=Challenge)
    """The competition the task restates, and each of its rules as checked or trusted
    (tasks/challenge.py)."""

    # Set by the loader, not the file.
    root: Path = Field(default=Path("."), exclude=True)

    @property
    def time_limit_s(self) -> float:
        return parse_duration(self.resources.time_limit)

    def starter_paths(self) -> list[Path]:
        return [self.root / p for p in self.files.starter]

    def hidden_paths(self) -> list[Path]:
        return [self.root / p for p in self.files.hidden]

    def starter_source(self, rel: str) -> Path | None:
        """The task file the workspace holds at `rel` when a run starts, or None."""
        return starter_source(self.starter_paths(), rel)

    def read_only_originals(self) -> dict[str, Path]:
        """The read-only workspace paths (`[files] read_only`), each with the task file
        it is a copy of: what the sandbox shows read-only and grading puts back."""
        out: dict[str, Path] = {}
        for rel in self.files.read_only:
            clean, source = workspace_relative(rel), self.starter_source(rel)
            if clean is not None and source is not None:  # the loader refuses any other
                out[clean] = source
        return out

    def render_prompt(self, *, time_limit_s: float | None = None) -> str:
        """The task as the agent reads it, in the benchmark's sections."""
        limit = format_duration(time_limit_s if time_limit_s is not None else self.time_limit_s)
        p = self.prompt
        sections = [
            ("Task", p.task),
            ("Dataset", p.dataset),
            ("Models", p.models),
            ("Compute", p.compute),
            (
                "Time limit",
                f"You have {limit} of working time. When it runs out, running "
                "commands are killed and whatever the workspace holds is evaluated.",
            ),
            ("Result", p.result),
            ("Evaluation", self._evaluation()),
            (
                "Rules",
                "\n\n".join(t for t in (p.rules.strip(), prompt_section(self.challenge)) if t),
            ),
            ("Notes", p.notes),
        ]
        parts = [f"# {self.title}"]
        parts += [f"## {head}\n{body.strip()}" for head, body in sections if body.strip()]
        return "\n\n".join(parts) + "\n"

    def _evaluation(self) -> str:
        """The evaluation section as the metric now stands: `{direction}` in it is the
        direction where someone stated it (the folder's mlra.toml, `--direction`), else
        that none is judged; a self-reported score is said, whoever wrote the task."""
        m = self.metric
        text = self.prompt.evaluation
        if m.direction_known:
            way = f"({m.name}: {'higher' if m.higher_is_better else 'lower'} is better)"
        else:
            way = (
                "(which way its score improves is not stated, so no success is judged: make "
                "the result as good as the task asks)"
            )
        text = text.replace("{direction}", way)
        if m.self_reported:
            text = (
                f"{text.rstrip()} The score is self-reported: {m.self_reported}. It is "
                "recorded as self-reported and never counts as a plain success."
            ).strip()
        return text


def load_task(path: Path) -> TaskSpec:
    """Load `path` (a task folder or its task.toml); raise TaskError naming what is wrong.
    Another file is refused naming it, not read as its folder: a task is its folder
    (starter and hidden files beside task.toml, and `mlra eval`, resume and fork read it
    again from there), so a stray `x.toml` would load whatever task.toml sits beside it."""
    if path.is_file() and path.name != "task.toml":
        raise TaskError(f"{path}: {_not_a_task_file(path)}")
    folder = path if path.is_dir() else path.parent
    toml_path = folder / "task.toml"
    if not toml_path.is_file():
        from mlra.tasks.foreign.loader import detect, near_miss

        if detect(folder) is not None:
            return _load_foreign(folder)
        missing = near_miss(folder)
        if missing is not None:
            raise TaskError(f"{folder}: not a task folder: no task.toml, and {missing}")
        raise TaskError(
            f"{toml_path}: no task.toml in this folder (and it is not an MLAgentBench or "
            "MLRC-Bench task folder)"
        )
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{toml_path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise TaskError(f"{toml_path}: not UTF-8 text") from None
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        raise TaskError(_field_problems(toml_path, exc)) from None
    spec.root = folder.resolve()
    for kind, paths in (("files.starter", spec.files.starter), ("files.hidden", spec.files.hidden)):
        for rel in paths:
            target = (spec.root / rel).resolve()
            if spec.root not in target.parents and target != spec.root:
                raise TaskError(f"{toml_path}: field {kind}: {rel!r} is outside the task folder")
            if not target.exists():
                raise TaskError(f"{toml_path}: field {kind}: {rel!r} does not exist")
    check_task(spec, str(toml_path))
    return spec


def _not_a_task_file(path: Path) -> str:
    """Why a file given as the task is not one, in words for its writer."""
    rule = "a task file must be named task.toml, in its task folder: give that folder"
    if path.suffix != ".toml":
        return f"not a task file; {rule}"
    try:
        tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return f"not valid TOML ({exc}); {rule}"
    return f"not named task.toml; {rule}"


def _field_problems(toml_path: Path, exc: ValidationError) -> str:
    """Every field's problem, so a task's writer fixes them in one try: a single one on
    the line naming the file, more each on a line of their own under it."""
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")  # pydantic's class of it, not the why
        if err["type"] == "missing":
            msg = "is required but missing"
        elif err["type"] == "extra_forbidden":
            msg = "is not a known field"
        lines.append(f"field {field}: {msg}")
    if len(lines) == 1:
        return f"{toml_path}: {lines[0]}"
    return f"{toml_path}: {len(lines)} problems:\n" + "\n".join(f"  {line}" for line in lines)


def check_task(
    spec: TaskSpec,
    where: str,
    *,
    baseline_measured_later: bool = False,
    measured_baseline: bool = False,
) -> None:
    """Refuse a task with a mistake no field's type catches (tasks/checks.py), in one
    line naming `where` (its file) and the field; for every loader of a task. A foreign
    folder's baseline is measured by its first baseline run (`baseline_measured_later`),
    so a rule that needs one does not refuse the folder before that run; a baseline
    measured past a published top (`measured_baseline`) does not refuse it either."""
    m = spec.metric
    problems = [
        *checks.direction_problems(
            m.higher_is_better,
            {
                "metric": (m.baseline, m.top),
                "validation": (spec.validation.baseline, spec.validation.top),
            },
        ),
        *checks.success_rule_problems(
            m.success_rule, m.baseline, m.success_threshold, set(m.model_fields_set)
        ),
        *checks.artifact_problems(spec.evaluator.artifact, spec.baseline.submit),
        *checks.recipe_problems(
            spec.baseline.submit,
            [(step.title, step.command) for step in spec.baseline.steps],
            lambda rel: spec.starter_source(rel) is not None,
            spec.files.starter,
        ),
        *checks.read_only_problems(
            spec.files.read_only, lambda rel: spec.starter_source(rel) is not None
        ),
        *challenge_problems(spec.challenge, spec.constraints),
    ]
    for field, problem in problems:
        if baseline_measured_later and field == "metric.baseline" and m.baseline is None:
            continue
        if measured_baseline and field == "metric.top":
            # A baseline this machine measured past a benchmark's published top is a
            # finding about the starter, not a mistake in the folder: it still loads.
            continue
        raise TaskError(f"{where}: field {field}: {problem}")


def _load_foreign(folder: Path) -> TaskSpec:
    """Another benchmark's task folder (MLAgentBench, MLRC-Bench), read as it is: the
    data tasks/foreign/ reads it as, validated as a task.toml's would be."""
    from mlra.tasks.foreign.loader import ForeignError, foreign_data

    try:
        data, root = foreign_data(folder)
    except ForeignError as exc:
        raise TaskError(str(exc)) from None
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        raise TaskError(f"{folder}: read as a task, field {field}: {msg}") from None
    spec.root = root
    from mlra.tasks.foreign.loader import recorded_baseline

    measured = spec.metric.baseline is not None and spec.metric.baseline == recorded_baseline(root)
    check_task(
        spec,
        f"{folder} (read as a task)",
        baseline_measured_later=True,
        measured_baseline=measured,
    )
    return spec


def builtin_task_dirs() -> list[Path]:
    return sorted(p for p in BUILTIN_TASKS_DIR.iterdir() if (p / "task.toml").is_file())


def find_task(name: str) -> TaskSpec:
    """A built-in task by name, or a task folder by path."""
    candidate = Path(name)
    if candidate.exists():
        return load_task(candidate)
    folder = BUILTIN_TASKS_DIR / name
    if (folder / "task.toml").is_file():
        return load_task(folder)
    known = ", ".join(p.name for p in builtin_task_dirs()) or "none"
    raise TaskError(f"unknown task {name!r}; known tasks: {known} (or give a task folder's path)")
