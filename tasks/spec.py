"""Tasks as data: a built-in task's `tasks/builtin/<name>/task.toml`, or any
folder's `task.toml`, and the files beside it.

A task says what the agent is asked (the prompt, in the ML Research Benchmark's
sections), which files it starts with, which files it must never see, how the
result is graded (metric, evaluator, reference scores) and what it needs to run.
A malformed file is refused with the file, the field and what is wrong.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mlra.durations import format_duration, parse_duration
from mlra.tasks import checks
from mlra.tasks.challenge import Challenge, challenge_problems, prompt_section
from mlra.tasks.constraints import Constraints
from mlra.tasks.starter import starter_source, workspace_relative
from mlra.tools.submission import DEFAULT_MAX_SUBMISSION_GB

BUILTIN_TASKS_DIR = Path(__file__).resolve().parent / "builtin"
"""The built-in tasks, one folder each (task.toml, starter/, hidden/, data), kept apart
from the code that reads, checks and grades them, so `tasks/` shows which is which."""


class TaskError(Exception):
    """A task that cannot be loaded; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Prompt(_Strict):
    task: str
    dataset: str = ""
    models: str = ""
    compute: str = ""
    result: str = ""
    evaluation: str = ""
    rules: str = ""
    notes: str = ""


class Files(_Strict):
    starter: list[str] = Field(default_factory=list)
    """Files or folders (relative to the task folder) whose contents are copied into the workspace."""
    hidden: list[str] = Field(default_factory=list)
    """Files or folders only the evaluator sees; never copied, hidden from the sandbox."""
    read_only: list[str] = Field(default_factory=list)
    """Workspace-relative paths of starter files (or folders) the agent may read but not
    change: mounted read-only in the sandbox, refused by the file-edit tools, and put
    back from the task folder in the copy that is graded, so a change cannot move the score."""


SuccessRule = Literal["gap_fraction", "relative_improvement", "threshold"]
"""How a run's score is judged a success (tasks/success.py): closing a fraction of the
baseline-to-top gap (MLRC-Bench's rule, mlra's default), beating the baseline by a
fraction of its size (MLAgentBench's 10%), or reaching an absolute score."""


class Metric(_Strict):
    name: str
    higher_is_better: bool = True
    baseline: float | None = None
    """The baseline recipe's score: normalized score 0."""
    top: float | None = None
    """The top reference score: normalized score 1."""
    success_rule: SuccessRule = "gap_fraction"
    success_fraction: float = 0.05
    """gap_fraction: a run succeeds when it closes at least this fraction of the
    baseline-to-top gap."""
    success_improvement: float = Field(default=0.10, ge=0)
    """relative_improvement: a run succeeds when its score beats `baseline` by more than
    this fraction of |baseline|, in the metric's direction (0.10: 10%)."""
    success_threshold: float | None = None
    """threshold: a run succeeds when its score reaches this value (at least it when
    higher is better, at most it when lower is better)."""
    success_strictly_above: bool = False
    """gap_fraction: the run must close more than `success_fraction` of the gap, not
    merely reach it (MLRC-Bench counts success strictly above its 5%)."""
    direction_known: bool = True
    """False where nothing says which way the metric improves (a foreign folder mlra
    cannot recognize): `higher_is_better` is then a placeholder, the run is scored but
    its success is not judged, and every display says how to state the direction."""
    self_reported: str = ""
    """Why the score is a number the workspace's own code wrote rather than a
    measurement (MLAgentBench's vectorization reads back the run time train.py wrote):
    such a score is marked wherever it is shown and never counts as a plain success."""
    failure_values: list[float] = Field(default_factory=list)
    """Scores the evaluator returns when it failed (MLAgentBench's vectorization gives
    1e10 when it cannot read a submission): a run graded with one of them has no score,
    and a baseline run that gets one records nothing."""
    score_range: tuple[float, float] | None = None
    """The scores the metric can take (accuracy: 0 to 1); a score outside is a failed
    grading, not a result."""

    @model_validator(mode="after")
    def _stated_direction(self) -> Metric:
        # A direction written down is a direction known: a task.toml imported with
        # `direction_known = false` needs only `higher_is_better` set to be judged.
        if "higher_is_better" in self.model_fields_set:
            self.direction_known = True
        return self


class Evaluator(_Strict):
    kind: Literal["classifier", "lm-eval", "script"]
    artifact: str = "submission"
    """Default artifact, relative to the workspace, when `submit` names none."""
    timeout: str = "30m"
    max_submission_gb: float = Field(default=DEFAULT_MAX_SUBMISSION_GB, gt=0)
    """The largest artifact frozen for grading (files' apparent sizes); a bigger one is
    refused rather than copied, so a submission cannot fill the host's disk."""
    settings: dict[str, Any] = Field(default_factory=dict)
    cannot_grade: str = ""
    """Why this machine cannot grade the task at all (a foreign folder with no eval.py,
    a test phase scored by an online service, a dataset the grader would download with
    no network): a run is refused before it starts unless the user asks to run it
    ungraded (`--ungraded`)."""


class Resources(_Strict):
    time_limit: str = "24h"
    gpus: int = 0
    gpu_memory_gb: float = 0
    cpus: float | None = None
    memory_gb: float | None = Field(default=None, ge=0)
    """The memory the sandbox's commands may use together (capped at what the machine can
    give: tools/sandbox/default_limits.py); unset or 0: the machine's default."""
    disk_gb: float | None = Field(default=None, ge=0)
    """The workspace's disk quota (capped at 90% of the free space); unset or 0: the default."""
    network: bool = False
    data: str = ""

    @field_validator("time_limit")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value)
        return value


class BaselineStep(_Strict):
    title: str
    command: str
    """A shell command; `{seed}` in it becomes the run's seed (`--seed`, a batch's seed
    number; 0 for a run given none), so a batch of baseline seeds measures the recipe's
    spread rather than one number repeated."""
    timeout: str = "1h"


class Baseline(_Strict):
    description: str = ""
    steps: list[BaselineStep] = Field(default_factory=list)
    submit: str | None = None
    """Artifact the recipe submits (relative to the workspace); the evaluator's default if unset."""
    vars: dict[str, str] = Field(default_factory=dict)
    """The recipe's variables and their values (`{steps}` in a command): what a plain
    baseline run uses."""
    variants: list[dict[str, str]] = Field(default_factory=list)
    """Variants a search tries (`mlra run TASK --model baseline --search greedy`): each
    sets some of `vars` (or `seed`), the rest keep their values. The first ones are the
    search's drafts; the rest, tried nearest the best first, its improvements."""

    @model_validator(mode="after")
    def _variants_name_vars(self) -> Baseline:
        for variant in self.variants:
            unknown = set(variant) - set(self.vars) - {"seed"}
            if unknown:
                raise ValueError(
                    f"a baseline variant sets {', '.join(sorted(unknown))}, which "
                    "[baseline.vars] does not declare"
                )
        return self


class ValidationSettings(_Strict):
    """`[validation]`: what the `validate` tool grades and how often (tools/validate.py,
    tasks/validation.py). The agent sees a validation score while it works; the final
    grade stays the hidden test split's."""

    settings: dict[str, Any] | None = None
    """The evaluator's settings for the validation split, laid over `evaluator.settings`
    (e.g. `tests = { sentiment = "hidden/validation.jsonl" }`). Unset: the task has no
    validation data, and `validate` checks the artifact's format and the rules only."""
    max_calls: int = Field(default=20, ge=0)
    """Validations one run may make."""
    min_interval: str = "1m"
    """Run-clock time between the starts of two validations."""
    grade_best_at_deadline: bool = False
    """Opt-in: a run that reaches its deadline with nothing submitted is graded on its best
    validated artifact (the frozen copy kept when it was validated), not the workspace."""
    baseline: float | None = None
    """The baseline recipe's score on the validation split (the test score is in [metric])."""
    top: float | None = None
    """The top reference's score on the validation split, where measured."""

    @field_validator("min_interval")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value)
        return value

    @property
    def min_interval_s(self) -> float:
        return parse_duration(self.min_interval)

    @property
    def split(self) -> Literal["validation", "format"]:
        return "format" if self.settings is None else "validation"


class SandboxSettings(_Strict):
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)


class EnvironmentSettings(_Strict):
    """`[environment]`: the task's own Python packages. A task written for other
    versions than mlra's (MLAgentBench's and MLRC-Bench's folders each expect their
    own environment) runs in a virtual environment built for it once, cached by the
    requirements' content; the sandbox's `python` and the evaluator's script run in it.
    Empty: mlra's own interpreter, as before."""

    requirements: list[str] = Field(default_factory=list)
    """Requirement lines as pip reads them (`packaging==21.3`)."""
    files: list[str] = Field(default_factory=list)
    """requirements.txt or environment.yml files, relative to the task folder."""

    @property
    def declared(self) -> bool:
        return bool(self.requirements or self.files)


class TaskSpec(_Strict):
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
    """Load `path` (a task folder or its task.toml); raise TaskError naming what is wrong."""
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
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        more = f" (and {len(exc.errors()) - 1} more problems)" if len(exc.errors()) > 1 else ""
        msg = err["msg"]
        if err["type"] == "missing":
            msg = "is required but missing"
        elif err["type"] == "extra_forbidden":
            msg = "is not a known field"
        raise TaskError(f"{toml_path}: field {field}: {msg}{more}") from None
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
        raise TaskError(f"{folder}: read as a task, field {field}: {err['msg']}") from None
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
