"""What a batch is: tasks x models x seeds, from flags or a TOML file.

The spec expands into a fixed list of runs with stable ids (named by the batch
folder's key, see `run_ids`), so running the same command again finds the same
run folders and carries on where it stopped.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections import Counter
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from mlra.batch.errors import BatchError as BatchError
from mlra.batch.run_ids import RunNames
from mlra.batch.task_labels import task_labels
from mlra.durations import parse_duration
from mlra.sizes import disk_mb
from mlra.tools.research_table import research_tool_name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Overrides(_Strict):
    """Per-task settings: limits passed to `mlra run`, and the resources a run asks for."""

    time_limit: str | None = None
    max_steps: int | None = Field(default=None, gt=0)
    max_cost: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    gpus: int | None = Field(default=None, ge=0)
    cpus: float | None = Field(default=None, gt=0)
    memory_gb: float | None = Field(default=None, ge=0)
    resources: dict[str, float] | None = None
    """Custom resources a run asks of a Ray node (`{ nodeB = 1 }`), as `ray start --resources` names them."""
    labels: dict[str, str] | None = None
    """Node labels a run must be placed on (Ray's label selector, `{ zone = "a" }`)."""
    accelerator_type: str | None = None
    """The accelerator a Ray node must have (`A100`, `H100`, as Ray names them)."""
    direction: Literal["higher", "lower"] | None = None
    """Which way the task's metric improves, for a folder whose own files do not say
    (`mlra run --direction`); a task whose direction is known refuses a contrary one."""
    agent: Literal["supervisor", "worker"] | None = None
    """Who does each run's work (`mlra run --agent`): `worker`, the worker alone, for
    small local models that cannot plan; not with `baseline` or a search."""
    search: Literal["none", "greedy", "llm"] | None = None
    """Each run's search over attempts (`mlra run --search`)."""
    attempts: int | None = Field(default=None, gt=0)
    """Attempts each searching run makes at most (`mlra run --attempts`): not the batch's
    `max_attempts`, which counts starts of one run."""
    attempts_parallel: int | None = Field(default=None, gt=0)
    attempt_min_time: str | None = None
    """The least time each searching run gives an attempt (`mlra run --attempt-min-time`),
    a duration ("45s", "2m")."""

    @field_validator("time_limit", "attempt_min_time")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value

    def merged(self, other: Overrides) -> Overrides:
        """`other` over this; custom resources and labels merge key by key."""
        mine, theirs = self.model_dump(exclude_none=True), other.model_dump(exclude_none=True)
        for key in ("resources", "labels"):
            if key in mine and key in theirs:
                theirs[key] = {**mine[key], **theirs[key]}
        return Overrides(**{**mine, **theirs})


class BatchSpec(_Strict):
    tasks: list[str] = Field(min_length=1)
    models: list[str] = Field(min_length=1)
    seeds: int = Field(default=1, gt=0)
    """How many runs of each task/model pair; seeds are numbered 1..seeds."""
    parallel: int | None = Field(default=None, gt=0)
    """At most this many runs at once (the machine's capacity limits it too)."""
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    out: Path | None = None
    base_url: str | None = None
    max_attempts: int = Field(default=3, gt=0)
    """Starts of one run (first try, resumes and retries together) before it is given up."""
    isolation: Literal["auto", "bwrap", "none"] | None = None
    tools: list[Annotated[str, BeforeValidator(research_tool_name)]] | None = None
    """The research tools each run has (`mlra run --tools`); None: the default, all."""
    allow_hosts: list[str] = Field(default_factory=list)
    """Hosts the research tools may fetch from beside the defaults (`--allow-host`)."""
    ungraded: bool = False
    """Run tasks this machine cannot grade all the same (`mlra run --ungraded`); without
    it a batch naming one is refused before any run starts."""
    log_budget: str | None = None
    """Each run's event log budget (`mlra run --log-budget`: `2g`, or `none`); None: the
    run's default (agent/record/log_budget.py)."""
    defaults: Overrides = Field(default_factory=Overrides)
    overrides: dict[str, Overrides] = Field(default_factory=dict)
    """Settings for one task, by the name it has in `tasks`."""

    @field_validator("log_budget", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = f"{value}m"  # a plain number is in MB, as `mlra run` reads it
        if isinstance(value, str):
            disk_mb(value)
            return value.strip()
        return value

    def out_dir(self) -> Path:
        """The batch folder; the same tasks, models and seeds give the same default folder."""
        if self.out is not None:
            return self.out
        key = "|".join([",".join(self.tasks), ",".join(self.models), str(self.seeds)])
        return Path("batches") / f"batch-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


SPEC_FILE = "batch.json"
SAME_RUNS = ("tasks", "models", "seeds")
"""What decides which runs a batch folder holds: a later batch on it includes them all."""


class KeptSpec(BatchSpec):
    """The spec as its batch folder keeps it (`batch.json`), with the names its tasks
    resolved to: a run's id is keyed by its task's label (its name, or the end of its
    folder's path where two tasks share a name: batch/task_labels.py), not by the words
    that named the task, so these are what say which runs the folder holds."""

    task_names: list[str] | None = None
    """The tasks' labels; None in a folder an earlier mlra made: its typed tasks are
    resolved again."""


def keep_spec(out: Path, spec: BatchSpec, tasks: list[BatchTask]) -> None:
    """Write the spec to the batch folder, refusing one that leaves out runs the folder
    was made for (a task, a model, a seed of its spec): its report would mix them in
    unsaid (a newcomer's `--models baseline --seeds 3` on a folder of two models' runs
    said `3/3 finished` over a report of 5 runs). A spec that holds them all carries the
    batch on or grows it (one more seed, another model); other settings (parallel,
    executor, attempts) may change between its sessions. Tasks compare as `tasks`
    (`load_tasks`) resolved them: `b,a` is `a,b`, and a folder given by another path,
    or a built-in task by its folder, is the same task, while one path naming another
    task from another directory is not."""
    path = out / SPEC_FILE
    try:
        earlier = KeptSpec.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        earlier = None  # a new folder, or a spec from an mlra that wrote it otherwise
    names = [task.label for task in tasks]
    if earlier is not None:
        was: dict[str, object] = {
            "tasks": earlier.task_names or [_task_name(t) for t in earlier.tasks],
            "models": earlier.models,
            "seeds": earlier.seeds,
        }
        now: dict[str, object] = {"tasks": names, "models": spec.models, "seeds": spec.seeds}
        changed = [
            f"{name} {_listed(was[name])} -> {_listed(now[name])}"
            for name in SAME_RUNS
            if not _covers(now[name], was[name])
        ]
        if changed:
            raise BatchError(
                f"batch: {out} holds runs this batch leaves out ({'; '.join(changed)}); "
                "its report would mix them in: give another --out, or a batch that "
                "includes them"
            )
    kept = KeptSpec.model_validate({**spec.model_dump(), "task_names": names})
    path.write_text(kept.model_dump_json(indent=2) + "\n", encoding="utf-8")


def _task_name(typed: str) -> str:
    """The name a task given as `typed` has, where it still loads from here."""
    from mlra.tasks.spec import TaskError, find_task

    try:
        return find_task(typed).name
    except TaskError:
        return typed


def _covers(new: object, old: object) -> bool:
    if isinstance(new, list) and isinstance(old, list):
        return set(old) <= set(new)
    return isinstance(new, int) and isinstance(old, int) and old <= new


def _listed(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


class Resources(BaseModel):
    cpus: float = 1.0
    memory_gb: float = 0.0
    gpus: int = 0
    custom: dict[str, float] = Field(default_factory=dict)
    """Custom resources (Ray only)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Node labels the run must be placed on (Ray only)."""
    accelerator_type: str | None = None
    """The accelerator type the node must have (Ray only)."""

    @property
    def placement(self) -> bool:
        """Whether the run asks for placement only a Ray cluster can give."""
        return bool(self.custom or self.labels or self.accelerator_type)


class RunSpec(BaseModel):
    """One run of the batch: its id, the `mlra run` arguments and what it needs."""

    run_id: str
    task: str
    """As the user named it (a task name or a folder)."""
    task_name: str
    task_label: str
    """What the batch calls the task (`BatchTask.label`): its runs' ids and report rows."""
    model: str
    seed: int
    settings: Overrides
    resources: Resources


def load_batch_file(path: Path) -> BatchSpec:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BatchError(f"cannot read batch file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BatchError(f"{path}: not valid TOML: {exc}") from None
    if "out" in data and not Path(data["out"]).is_absolute():
        data["out"] = str(path.parent / data["out"])
    return parse_spec(data, where=str(path))


def parse_spec(data: dict[str, object], *, where: str = "batch") -> BatchSpec:
    try:
        return BatchSpec.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"]) or "batch"
        raise BatchError(
            f"{where}: {field}: {error['msg'].removeprefix('Value error, ')}"
        ) from None


class BatchTask(BaseModel):
    """One task of the batch, loaded: what each of its runs is given."""

    task: str
    """As `mlra run` is to be given it (a task name, or a folder's absolute path)."""
    name: str
    label: str
    """What the batch calls it (its runs' ids, report rows): its name, or where another
    of the batch's tasks has that name, the end of its folder's path (batch/task_labels.py)."""
    settings: Overrides
    resources: Resources


def load_tasks(spec: BatchSpec) -> list[BatchTask]:
    """The batch's tasks, loaded: bad names fail here, before anything is written."""
    from mlra.tasks.spec import TaskError, find_task
    from mlra.tasks.success import direction_conflict

    unknown = set(spec.overrides) - set(spec.tasks)
    if unknown:
        raise BatchError(f"overrides for tasks not in the batch: {', '.join(sorted(unknown))}")
    if any(not model.strip() for model in spec.models):
        raise BatchError("an empty model name in --models")
    tasks: list[BatchTask] = []
    folders: list[Path] = []
    for task in spec.tasks:
        try:
            loaded = find_task(task)
        except TaskError as exc:
            raise BatchError(str(exc)) from None
        folder = loaded.root.resolve()
        if folder in folders:
            continue  # one task given twice (`a,a`, `a,./a/`): its runs once
        folders.append(folder)
        settings = spec.defaults.merged(spec.overrides.get(task, Overrides()))
        conflict = direction_conflict(loaded, settings.direction)
        if conflict is not None:
            raise BatchError(f"{task}: {conflict}")
        declared = loaded.resources
        resources = Resources(
            cpus=settings.cpus or declared.cpus or 1.0,
            memory_gb=settings.memory_gb
            if settings.memory_gb is not None
            else declared.memory_gb or 0.0,
            gpus=settings.gpus if settings.gpus is not None else declared.gpus,
            custom=settings.resources or {},
            labels=settings.labels or {},
            accelerator_type=settings.accelerator_type,
        )
        where = str(Path(task).resolve()) if Path(task).is_dir() else task
        tasks.append(
            BatchTask(
                task=where,
                name=loaded.name,
                label=loaded.name,
                settings=settings,
                resources=resources,
            )
        )
    labels = task_labels([(t.name, folder) for t, folder in zip(tasks, folders, strict=True)])
    return [t.model_copy(update={"label": label}) for t, label in zip(tasks, labels, strict=True)]


def expand(spec: BatchSpec, names: RunNames, tasks: list[BatchTask] | None = None) -> list[RunSpec]:
    """Every run of the batch, named as its batch folder names them (`run_ids.run_names`).
    Two runs given one id would share a folder: in a folder from before run ids were keyed
    (ids of the readable part alone), two tasks whose labels slug alike (`a b/x`, `a-b/x`)."""
    runs = [
        RunSpec(
            run_id=names.run_id(task.label, model, seed),
            task=task.task,
            task_name=task.name,
            task_label=task.label,
            model=model,
            seed=seed,
            settings=task.settings,
            resources=task.resources,
        )
        for task in (load_tasks(spec) if tasks is None else tasks)
        for model in spec.models
        for seed in range(1, spec.seeds + 1)
    ]
    ids = Counter(run.run_id for run in runs)
    shared = [run for run in runs if ids[run.run_id] > 1]
    if shared:
        raise BatchError(
            f"two runs of this batch would be named {shared[0].run_id} "
            f"({shared[0].task_label}, {shared[1].task_label}): give another --out"
        )
    return runs


def run_command(
    run: RunSpec,
    spec: BatchSpec,
    runs_dir: Path,
    *,
    python: str,
    shared_by: int = 1,
    free_mb: int | None = None,
) -> list[str]:
    """The `mlra run` command line of one run: a batch run is an ordinary headless run,
    told how many runs share its machine's defaults (`shared_by`, `--parallel` runs at
    once on one machine) and the free disk the batch measured when it started (`free_mb`),
    which their default disk shares are taken from."""
    command = [python, "-m", "mlra", "run", run.task, "--model", run.model, "--no-tui"]
    if shared_by > 1:
        command += ["--machine-shared-by", str(shared_by)]
    if free_mb is not None:
        command += ["--machine-free-disk", str(free_mb)]
    command += ["--runs-dir", str(runs_dir), "--run-id", run.run_id, "--seed", str(run.seed)]
    if spec.base_url and run.model != "baseline":
        command += ["--base-url", spec.base_url]
    if spec.isolation:
        command += ["--isolation", spec.isolation]
    if spec.tools is not None:
        command += ["--tools", ",".join(spec.tools) or "none"]
    for host in spec.allow_hosts:
        command += ["--allow-host", host]
    if spec.ungraded:
        command.append("--ungraded")
    if spec.log_budget is not None:
        command += ["--log-budget", spec.log_budget]
    s = run.settings
    for flag, value in (
        ("--time-limit", s.time_limit),
        ("--max-steps", s.max_steps),
        ("--max-cost", s.max_cost),
        ("--max-tokens", s.max_tokens),
        ("--direction", s.direction),
        ("--agent", s.agent),
        ("--search", s.search),
        ("--attempts", s.attempts),
        ("--attempts-parallel", s.attempts_parallel),
        ("--attempt-min-time", s.attempt_min_time),
    ):
        if value is not None:
            command += [flag, str(value)]
    return command
