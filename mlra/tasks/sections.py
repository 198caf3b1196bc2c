"""The sections of a task file (`[prompt]`, `[files]`, `[metric]`, `[evaluator]`,
`[resources]`, `[baseline]`, `[validation]`, `[sandbox]`, `[environment]`), each a strict
model of what it may hold.

They live apart from tasks/spec.py, which puts them together as a TaskSpec and loads,
checks and finds tasks, so what a field means can be read without the loading around it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from mlra.durations import parse_duration
from mlra.tasks.evaluators.kinds import evaluator_kind
from mlra.tools.submission import DEFAULT_MAX_SUBMISSION_GB


def _checked_duration(value: str) -> str:
    parse_duration(value)
    return value


Duration = Annotated[str, AfterValidator(_checked_duration)]
"""A time as task files write it ("90s", "20m", "1h30m"), checked when the file loads: a
time-out nobody can read was found only when it was used, as a traceback after the run's
work (the evaluator's at grading, a recipe step's when it ran)."""


class StrictModel(BaseModel):
    """A section that refuses a field it does not know, so a typo in task.toml is an
    error naming the field rather than a setting silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Prompt(StrictModel):
    task: str
    dataset: str = ""
    models: str = ""
    compute: str = ""
    result: str = ""
    evaluation: str = ""
    rules: str = ""
    notes: str = ""


class Files(StrictModel):
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


class Metric(StrictModel):
    name: str
    higher_is_better: bool = True
    baseline: float | None = None
    """The baseline recipe's score: normalized score 0."""
    top: float | None = None
    """The top reference score: normalized score 1."""
    success_rule: SuccessRule = "gap_fraction"
    success_fraction: float = Field(default=0.05, ge=0)
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
    def _ordered_range(self) -> Metric:
        # Reversed, every score would fall outside and every grading read "no score".
        if self.score_range is not None and self.score_range[0] > self.score_range[1]:
            low, high = self.score_range
            raise ValueError(f"score_range [{low:g}, {high:g}] must list the lowest score first")
        return self

    @model_validator(mode="after")
    def _stated_direction(self) -> Metric:
        # A direction written down is a direction known: a task.toml imported with
        # `direction_known = false` needs only `higher_is_better` set to be judged.
        if "higher_is_better" in self.model_fields_set:
            self.direction_known = True
        return self


class Evaluator(StrictModel):
    kind: Annotated[str, BeforeValidator(evaluator_kind)]
    """Which evaluator grades the task: a line of tasks/evaluators/kinds.py."""
    artifact: str = "submission"
    """Default artifact, relative to the workspace, when `submit` names none."""
    timeout: Duration = "30m"
    max_submission_gb: float = Field(default=DEFAULT_MAX_SUBMISSION_GB, gt=0)
    """The largest artifact frozen for grading (files' apparent sizes); a bigger one is
    refused rather than copied, so a submission cannot fill the host's disk."""
    settings: dict[str, Any] = Field(default_factory=dict)
    cannot_grade: str = ""
    """Why this machine cannot grade the task at all (a foreign folder with no eval.py,
    a test phase scored by an online service, a dataset the grader would download with
    no network): a run is refused before it starts unless the user asks to run it
    ungraded (`--ungraded`)."""


class Resources(StrictModel):
    time_limit: Duration = "24h"
    gpus: int = Field(default=0, ge=0)
    gpu_memory_gb: float = Field(default=0, ge=0)
    cpus: float | None = Field(default=None, gt=0)
    memory_gb: float | None = Field(default=None, ge=0)
    """The memory the sandbox's commands may use together (capped at what the machine can
    give: tools/sandbox/default_limits.py); unset or 0: the machine's default."""
    disk_gb: float | None = Field(default=None, ge=0)
    """The workspace's disk quota (capped at 90% of the free space); unset or 0: the default."""
    network: bool = False
    data: str = ""


class BaselineStep(StrictModel):
    title: str
    command: str
    """A shell command; `{seed}` in it becomes the run's seed (`--seed`, a batch's seed
    number; 0 for a run given none), so a batch of baseline seeds measures the recipe's
    spread rather than one number repeated."""
    timeout: Duration = "1h"


class Baseline(StrictModel):
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


class ValidationSettings(StrictModel):
    """`[validation]`: what the `validate` tool grades and how often (tools/validate.py,
    tasks/validation.py). The agent sees a validation score while it works; the final
    grade stays the hidden test split's."""

    settings: dict[str, Any] | None = None
    """The evaluator's settings for the validation split, laid over `evaluator.settings`
    (e.g. `tests = { sentiment = "hidden/validation.jsonl" }`). Unset: the task has no
    validation data, and `validate` checks the artifact's format and the rules only."""
    max_calls: int = Field(default=20, ge=0)
    """Validations one run may make."""
    min_interval: Duration = "1m"
    """Run-clock time between the starts of two validations."""
    grade_best_at_deadline: bool = False
    """Opt-in: a run that reaches its deadline with nothing submitted is graded on its best
    validated artifact (the frozen copy kept when it was validated), not the workspace."""
    baseline: float | None = None
    """The baseline recipe's score on the validation split (the test score is in [metric])."""
    top: float | None = None
    """The top reference's score on the validation split, where measured."""

    @property
    def min_interval_s(self) -> float:
        return parse_duration(self.min_interval)

    @property
    def split(self) -> Literal["validation", "format"]:
        return "format" if self.settings is None else "validation"


class SandboxSettings(StrictModel):
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)


class EnvironmentSettings(StrictModel):
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
