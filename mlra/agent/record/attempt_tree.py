"""The search tree, folded from `attempt_started` and `attempt_finished` events.

One fold for everything that shows or uses the tree: the supervisor's prompt (the
compact table), the console's Attempts pane, replay at any event, `result.json`,
`mlra runs` and batch reports. A node knows only what its events say, so the tree
a replay shows at an event is the tree the run had then.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from mlra import events as ev
from mlra.durations import format_duration

TABLE_ROWS = 12
"""Rows the supervisor's table shows: the best first, then the latest."""


@dataclass
class AttemptNode:
    started: ev.AttemptStarted
    finished: ev.AttemptFinished | None = None
    time_limit_s: float = 0.0
    """Its time limit: as it started, or as a later attempt's start raised it."""

    @property
    def id(self) -> str:
        return self.started.attempt

    @property
    def parent(self) -> str | None:
        return self.started.parent

    def folder_in(self, run_dir: Path) -> Path | None:
        """Its run folder, where it lies inside the search's (`attempts/a1`); None for a
        folder the log names outside it. The console's views and the shared page read
        an attempt's log from here alike."""
        root = run_dir.resolve()
        folder = (root / self.started.folder).resolve()
        return folder if folder.is_relative_to(root) and folder != root else None

    @property
    def status(self) -> ev.AttemptStatus:
        return self.finished.status if self.finished is not None else "running"

    @property
    def score(self) -> float | None:
        """Its best validation score (a stopped attempt keeps the one it had earned)."""
        return self.finished.score if self.finished is not None else None

    def elapsed_s(self, now: float) -> float:
        """Run-clock seconds it ran (so far, while running)."""
        if self.finished is not None:
            return self.finished.duration_s
        return max(0.0, now - self.started.t)

    @property
    def what(self) -> str:
        """What it tried, in a line: its summary once it ended, else its instructions."""
        if self.finished is not None and self.finished.summary.strip():
            text = self.finished.summary
        elif self.started.variant:
            text = " ".join(f"{k}={v}" for k, v in self.started.variant.items())
        else:
            text = self.started.instructions
        return " ".join(text.split())


@dataclass
class AttemptTree:
    nodes: dict[str, AttemptNode] = field(default_factory=dict)

    def apply(self, event: ev.Event) -> None:
        if isinstance(event, ev.AttemptStarted):
            for attempt, limit in event.raised.items():
                if (node := self.nodes.get(attempt)) is not None:
                    node.time_limit_s = max(node.time_limit_s, limit)
            self.nodes[event.attempt] = AttemptNode(started=event, time_limit_s=event.time_limit_s)
        elif isinstance(event, ev.AttemptFinished) and event.attempt in self.nodes:
            self.nodes[event.attempt].finished = event

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def get(self, attempt: str) -> AttemptNode | None:
        return self.nodes.get(attempt)

    @property
    def running(self) -> list[AttemptNode]:
        return [n for n in self.nodes.values() if n.finished is None]

    @property
    def higher_is_better(self) -> bool:
        for node in self.nodes.values():
            if node.finished is not None and node.finished.metric:
                return node.finished.higher_is_better
        return True

    def ranked(self) -> list[AttemptNode]:
        """Validated attempts, best first (the earlier of equal scores first)."""
        scored = [n for n in self.nodes.values() if n.score is not None]
        sign = -1.0 if self.higher_is_better else 1.0
        return sorted(scored, key=lambda n: (sign * (n.score or 0.0), n.started.seq))

    @property
    def best(self) -> AttemptNode | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def depth(self, attempt: str) -> int:
        """How many ancestors it has (0: started from the starter)."""
        depth, node = 0, self.nodes.get(attempt)
        while node is not None and node.parent is not None and depth < len(self.nodes):
            depth += 1
            node = self.nodes.get(node.parent)
        return depth

    def debug_depth(self, attempt: str) -> int:
        """How many debug attempts in a row led to it (AIDE's bound on fixing a fix)."""
        depth, node = 0, self.nodes.get(attempt)
        while node is not None and node.started.operator == "debug" and depth < len(self.nodes):
            depth += 1
            node = self.nodes.get(node.parent or "")
        return depth

    def lineage(self, attempt: str) -> str:
        """`a1 > a3 > a5`: the attempt and its ancestors, oldest first."""
        chain: list[str] = []
        node = self.nodes.get(attempt)
        while node is not None and len(chain) <= len(self.nodes):
            chain.append(node.id)
            node = self.nodes.get(node.parent or "")
        return " > ".join(reversed(chain))

    def in_tree_order(self) -> list[AttemptNode]:
        """Depth first, children in the order they started: how a tree is drawn."""
        children: dict[str | None, list[AttemptNode]] = {}
        for node in self.nodes.values():
            parent = node.parent if node.parent in self.nodes else None
            children.setdefault(parent, []).append(node)
        out: list[AttemptNode] = []

        def walk(parent: str | None) -> None:
            for child in children.get(parent, []):
                out.append(child)
                walk(child.id)

        walk(None)
        return out

    # --- as text ------------------------------------------------------------------------

    def score_text(self, node: AttemptNode) -> str:
        if node.finished is None:
            return "running"
        if node.score is not None:
            return f"{node.score:.4g}" + ("" if node.status == "validated" else f", {node.status}")
        return node.status

    def render(self, now: float, *, rows: int = TABLE_ROWS) -> str:
        """The tree as the supervisor reads it: best first, then the latest, each with its
        lineage, status and what it tried; buggy ones with why."""
        if not self.nodes:
            return ""
        best = self.best
        shown: list[AttemptNode] = [*self.ranked()[:3]]
        for node in reversed(list(self.nodes.values())):
            if len(shown) >= rows:
                break
            if node not in shown:
                shown.append(node)
        direction = "higher" if self.higher_is_better else "lower"
        metric = next(
            (n.finished.metric for n in self.nodes.values() if n.finished and n.finished.metric),
            "validation score",
        )
        lines = [
            f"Attempts ({len(self.nodes)}; {len(self.running)} running; {metric}, "
            f"{direction} is better; best first, then the latest):"
        ]
        for node in shown:
            mark = " (best)" if node is best else ""
            # A draft's lineage is itself alone: "from the starter (a2)" said nothing more.
            origin = (
                f"from {node.parent} ({self.lineage(node.id)})"
                if node.parent
                else ("from the starter")
            )
            line = (
                f"- {node.id}{mark} [{self.score_text(node)}] {node.started.operator}, "
                f"{origin}, "
                f"{format_duration(node.elapsed_s(now))}: {_clip(node.what, 160)}"
            )
            if node.finished is not None and node.finished.why and node.score is None:
                line += f" | why: {_clip(node.finished.why, 200)}"
            lines.append(line)
        if len(self.nodes) > len(shown):
            lines.append(f"({len(self.nodes) - len(shown)} more not shown)")
        return "\n".join(lines)


ENDINGS: tuple[tuple[str, ev.AttemptStatus], ...] = (
    ("validated", "validated"),
    ("buggy", "buggy"),
    ("out_of_time", "out of time"),
    ("stopped", "stopped"),
    ("lost", "lost"),
    ("running", "running"),
)
"""Where an attempt stands, as `AttemptsSummary` counts it (the field) and as every line
that sums up a search words it (the status), in the order they are said. They part
`tried` between them: each attempt is counted under one."""


def counts_words(tried: int, **counts: int | None) -> str:
    """A search's attempts as every verdict line says them (replay's, the headless run's
    last line, `mlra runs`, `mlra compare`, batch reports): `4 tried (2 validated, 1
    stopped, 1 lost)`, each count `ENDINGS` names by its field, zeros left out, so a
    search whose attempts all validated reads `3 tried (3 validated)`."""
    said = [f"{n} {word}" for name, word in ENDINGS if (n := counts.get(name))]
    return f"{tried} tried" + (f" ({', '.join(said)})" if said else "")


class AttemptsSummary(BaseModel):
    """What `result.json` says of a search: how many attempts and how each ended, the best
    validation, which attempt was submitted and its validation beside its test score (the
    gap between them is what selecting on validation overfits)."""

    tried: int
    """Every attempt started: `validated`, `buggy`, `out_of_time`, `stopped`, `lost` and
    `running` add up to it (in a result.json from before `stopped`, `lost` and `running`
    were counted, those read 0 and the sum may fall short)."""
    validated: int
    buggy: int
    out_of_time: int = 0
    """Attempts whose time (their own limit or the run's) ran out before an artifact of
    their own was scored: apart from `buggy`, as no fault of their recipe (0 in a
    result.json from before the status)."""
    stopped: int = 0
    """Attempts stopped before they ended (by the supervisor, the person or a budget's
    end of the run), or never started (their copy of the parent's workspace refused).
    Those the run's deadline ended were counted here before `run_deadline` was kept."""
    lost: int = 0
    """Attempts whose run died and could not be taken up again (their sandbox or node
    gone; in a fork, those running at the fork's step)."""
    running: int = 0
    """Attempts not ended yet: a run still going, or one cut off while they ran."""
    best: str | None = None
    best_validation: float | None = None
    submitted: str | None = None
    submitted_validation: float | None = None
    test_score: float | None = None
    validation_to_test_gap: float | None = None
    """The submitted attempt's test score minus its validation score (same metric and
    direction where the task's validation split is scored like its test)."""

    @property
    def in_words(self) -> str:
        """The counts as every verdict line words them (`counts_words`)."""
        return counts_words(self.tried, **{name: getattr(self, name) for name, _ in ENDINGS})


def summary_of(
    tree: AttemptTree, submitted: str | None, test_score: float | None
) -> AttemptsSummary | None:
    if not tree:
        return None
    best = tree.best
    node = tree.get(submitted) if submitted else None
    validation = node.score if node is not None else None
    gap = (
        round(test_score - validation, 6)
        if test_score is not None and validation is not None
        else None
    )
    ended = Counter(n.status for n in tree.nodes.values())
    return AttemptsSummary(
        tried=len(tree),
        **{name: ended[status] for name, status in ENDINGS},
        best=best.id if best else None,
        best_validation=best.score if best else None,
        submitted=submitted,
        submitted_validation=validation,
        test_score=test_score if submitted else None,
        validation_to_test_gap=gap,
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
