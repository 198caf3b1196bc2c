"""The greedy search policy (`--search greedy`), AIDE's, over attempts.

Draft until `drafts` attempts exist; then debug a buggy attempt whose chain of debug
attempts is shorter than `max_debug_depth`, or else improve the best validated one;
until `--attempts` have been started; then submit the best. With a model, each step is
an LLM worker's subtask in an attempt of its own (agent/agents/attempt_agent.py). With no model
(`--model baseline`) the steps are the variants the task's recipe declares
(`[baseline] variants`): the first ones are the drafts, then the untried variant nearest
the best one is its improvement, so the whole loop runs with no LLM.

AIDE picks debug or improve at random (its debug probability); here the choice is fixed
(debug first, while a buggy leaf is within the depth), so a run and its resume choose
alike. Every action goes through the run's tools (attempt_start, attempt_wait, submit),
so the log records it and a resumed run catches up with it like any agent's.
"""

from __future__ import annotations

from typing import Any

from mlra import events as ev
from mlra.agent.loop.ending import unsubmitted
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.record.attempt_tree import AttemptNode, AttemptTree
from mlra.agent.run.controller import Agent, Ending, EndRun, RunController
from mlra.tools.attempts import attempt_tools
from mlra.tools.registry import ToolOutcome, ToolRegistry
from mlra.tools.submit import SubmitAttempt

MAX_DEBUG_DEPTH = 2
"""A buggy attempt's fixes are themselves fixed at most this many times in a row."""
WAIT_S = 3600.0
"""The longest wait the policy asks for; never more than the run's time left, which
bounds the wait all the same, so that its call says the wait it is ("up to 19m58s" in a
20-minute run, not "up to 60m")."""


def draft_count(attempts: int) -> int:
    """AIDE's number of drafts, kept under the attempts so some improve: half, at most 5."""
    return max(1, min(5, (attempts + 1) // 2))


class GreedySearch(Agent):
    def __init__(self, controller: RunController) -> None:
        self.ctl = controller
        self.role: ev.AgentRole = "baseline" if controller.provider is None else "supervisor"
        manager = controller.attempts
        tools = attempt_tools(manager, recipe=self.role == "baseline")
        self.registry = ToolRegistry([*tools, SubmitAttempt(manager)])
        self.drafts = draft_count(controller.config.attempts)
        self.variants = list(controller.task.baseline.variants)
        self._refused = ""
        """Why the latest attempt_start was refused: a search that started none says it."""

    @property
    def tree(self) -> AttemptTree:
        return self.ctl.state.attempts

    async def run(self) -> None:
        if self.role == "baseline" and not self.variants:
            raise EndRun(
                Ending(
                    reason="error",
                    status="error",
                    evaluate=False,
                    by="error",
                    message=f"task {self.ctl.task.name} declares no recipe variants "
                    "([baseline] variants) for a search with no model",
                )
            )
        self._plan("searching")
        while True:
            started = len(self.tree) < self.ctl.config.attempts
            if started and self.ctl.attempts.slots():
                step = self._next()
                if step is not None:
                    outcome = await self._call("attempt_start", step)
                    if outcome.ok:
                        continue
                    self._refused = outcome.error or outcome.output
                    if not self.tree.running:
                        break  # refused with nothing running (no time left): submit
            if not self.tree.running:
                if not started or self._next() is None:
                    break
                continue
            left = float(max(1, round(self.ctl.clock.remaining())))
            await self._call("attempt_wait", {"timeout": min(WAIT_S, left)})
        await self._submit_best()

    def _next(self) -> dict[str, Any] | None:
        """The next attempt's arguments (attempt_start's), or None when there is none."""
        tree = self.tree
        nodes = list(tree.nodes.values())
        if self.role == "baseline":
            return self._next_variant(nodes)
        drafts = [n for n in nodes if n.started.operator == "draft"]
        if len(drafts) < self.drafts or (tree.best is None and not self._debuggable()):
            return {
                "operator": "draft",
                "instructions": "Draft a complete solution to the task, different from the "
                "other drafts: " + _others(drafts),
            }
        buggy = self._debuggable()
        if buggy is not None:
            why = buggy.finished.why if buggy.finished is not None else ""
            return {
                "operator": "debug",
                "parent": buggy.id,
                "instructions": f"Attempt {buggy.id} failed: {why}. Its work is in your "
                "workspace; fix what broke, then validate.",
            }
        best = tree.best
        assert best is not None
        return {
            "operator": "improve",
            "parent": best.id,
            "instructions": f"Attempt {best.id} is the best so far ({tree.score_text(best)}); "
            f"it did: {best.what[:600]}. Make one targeted change that should improve its "
            "validation score, and measure it.",
        }

    def _debuggable(self) -> AttemptNode | None:
        """The latest buggy leaf whose debug chain is shorter than the bound."""
        tree = self.tree
        parents = {n.parent for n in tree.nodes.values()}
        for node in reversed(list(tree.nodes.values())):
            if (
                node.status == "buggy"
                and node.id not in parents
                and tree.debug_depth(node.id) < MAX_DEBUG_DEPTH
            ):
                return node
        return None

    def _next_variant(self, nodes: list[AttemptNode]) -> dict[str, Any] | None:
        tried = [n.started.variant for n in nodes]
        untried = [v for v in self.variants if v not in tried]
        if not untried:
            return None
        best = self.tree.best
        if len(nodes) < self.drafts or best is None:
            variant, parent = untried[0], None
        else:
            # The untried variant nearest the best one: greedy hill-climbing on the recipe.
            variant = min(untried, key=lambda v: _distance(v, best.started.variant))
            parent = best.id
        words = " ".join(f"{k}={v}" for k, v in variant.items())
        return {
            "operator": "variant",
            "instructions": f"the recipe with {words}" if words else "the recipe as it is",
            "variant": variant,
            **({"parent": parent} if parent else {}),
        }

    async def _submit_best(self) -> None:
        best = self.tree.best
        if best is None:
            self._plan("no attempt validated", searched="failed")
            why = (
                f"none of the {len(self.tree)} attempts ended with a validated artifact"
                if self.tree
                # the refusal, less its advice to a supervisor ("; submit the best one")
                else f"no attempt could start ({self._refused.split('; ')[0]})"
            )
            raise EndRun(unsubmitted("no_submission", f"{why}, so nothing was submitted"))
        self._plan(f"submitting {best.id}", searched="done")
        outcome = await self._call(
            "submit",
            {"attempt": best.id, "note": f"the best of {len(self.tree)} attempts (greedy)"},
        )
        if not outcome.ok:
            self._plan(f"submitting {best.id} failed", searched="done", submitted="failed")
            raise EndRun(unsubmitted("no_submission", f"submitting {best.id} failed"))
        self._plan(f"submitted {best.id}", searched="done", submitted="done")
        raise EndRun(
            Ending(
                reason="submitted",
                by="agent",
                note=f"the best of {len(self.tree)} attempts (greedy)",
                attempt=best.id,
            )
        )

    async def _call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        step = await self.ctl.begin_step(self.role, counts=True)
        self.ctl.emit(ev.StepStarted(agent=self.role, step=step, turn=step))
        call = ToolCallRequest(id=self.ctl.next_call_id(self.role), name=name, arguments=arguments)
        return await self.ctl.execute_tool(self.role, call, self.registry, step=step, turn=step)

    def _plan(
        self,
        reason: str,
        *,
        searched: ev.PlanStatus | None = None,
        submitted: ev.PlanStatus | None = None,
    ) -> None:
        """The plan as the search stands: searching, then (`searched`: how the search
        ended) submitting (`submitted`: how that went); a finished search says how many
        attempts it made and the best, so the Plan pane never shows a search that ran as
        "not started", nor a submission that was made as still under way."""
        title = "Search: drafts, then debug or improve the best"
        if searched is not None:
            best = self.tree.best
            found = f", best {best.id} {self.tree.score_text(best)}" if best is not None else ""
            title = f"Searched: {len(self.tree)} attempts{found}"
        steps = [
            ev.PlanStep(id="search", title=title, status=searched or "in_progress"),
            ev.PlanStep(
                id="submit",
                title="Submit the best validated attempt",
                status=submitted or ("in_progress" if searched == "done" else "pending"),
            ),
        ]
        self.ctl.set_plan(steps, reason, agent=self.role)


def _distance(a: dict[str, str], b: dict[str, str]) -> int:
    keys = set(a) | set(b)
    return sum(1 for k in keys if a.get(k) != b.get(k))


def _others(drafts: list[AttemptNode]) -> str:
    if not drafts:
        return "this is the first."
    return "the others tried: " + "; ".join(f"{d.id}: {d.what[:200]}" for d in drafts)
