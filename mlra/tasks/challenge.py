"""The challenge a task comes from, and each of its rules as mlra holds to it.

A benchmark task restates a competition (the LLM-Merging Competition, the NeurIPS
edge-LLM challenge, BabyLM): the challenge's own rules are the contract, and a
grade is only as honest as the rules it enforces. So every rule the challenge
states is listed in `[[challenge.rules]]`, in the challenge's words, with where it
is stated and whether mlra checks it (and how) or trusts the agent with it (and
why it cannot be checked). `mlra tasks show` lists them, the agent's prompt says
which are checked, and the grade records how many were checked and which were
trusted, so a score never claims more than was verified.

A checked rule names the checks that enforce it (`checks`: a `[constraints]`
field, or a check an evaluator reports under that name); a submission a check
refuses is refused with the rule's words (`quote_rules`). Where mlra's grade
deliberately differs from the challenge's (`differs`), the challenge's own metric
is reported beside mlra's (`own_metric`, a key of the grade's metrics).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mlra.events import RulesSummary
from mlra.tasks.constraints import Constraints

RuleStatus = Literal["checked", "trusted"]

EVALUATOR_CHECKS: dict[str, str] = {
    "weights": "the submission's weight files can be read at all",
    "max_peak_memory_gb": "memory the model needs while it runs (edge efficiency setting)",
    "lossless_tokenizer": "the tokenizer gives back the text it encodes",
    "running_memory": "the model's peak memory while it runs, alone in a fresh process "
    "(lm-eval setting running_memory)",
    "pretrained_tokenizer": "the tokenizer is not a known pretrained vocabulary "
    "(lm-eval setting refuse_pretrained_tokenizer)",
    "evaluator": "the evaluator itself (what it scores, on which data, how)",
}
"""Checks an evaluator (not `[constraints]`) reports, by the name that begins its
violation (`max_peak_memory_gb: the model needed ...`). A task's rule may name one in
`checks`; an evaluator that adds a check adds its name here."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChallengeRule(_Strict):
    """One rule of the challenge, and what mlra does about it."""

    text: str = Field(min_length=1)
    """The rule in the challenge's own words (or as near as a quote allows)."""
    source: str = Field(min_length=1)
    """Where the challenge states it: a URL, a file of its repository, a paper's section."""
    status: RuleStatus
    how: str = Field(min_length=1)
    """checked: how mlra checks it; trusted: why it cannot be checked here."""
    checks: list[str] = Field(default_factory=list)
    """The checks that enforce the rule: `[constraints]` fields or EVALUATOR_CHECKS names.
    A violation beginning with one of them (`max_parameters: ...`) is reported with this
    rule's text. A trusted rule may name the checks that catch part of it (a name the
    files give away) while the rest stays trusted: it counts as trusted."""


class Challenge(_Strict):
    """`[challenge]` in task.toml: the competition a task restates and its rules."""

    name: str = ""
    source: str = ""
    """Where the challenge is stated (its rules page, the benchmark's task repository)."""
    metric_note: str = ""
    """The challenge's own metric, as it computed it."""
    differs: str = ""
    """Where mlra's grade deliberately differs from the challenge's, and why; empty when
    it is graded as the challenge graded it."""
    own_metric: str = ""
    """With `differs`: the key of the grade's metrics that holds the challenge's own
    metric, reported beside mlra's score."""
    rules: list[ChallengeRule] = Field(default_factory=list)

    def summary(self, metrics: dict[str, float] | None = None) -> RulesSummary | None:
        """What a grade records of the rules: None for a task that lists none."""
        if not self.rules and not self.differs:
            return None
        own = (metrics or {}).get(self.own_metric) if self.own_metric else None
        return RulesSummary(
            checked=sum(r.status == "checked" for r in self.rules),
            trusted=sum(r.status == "trusted" for r in self.rules),
            trusted_rules=[r.text for r in self.rules if r.status == "trusted"],
            differs=self.differs or None,
            own_metric=self.own_metric or None,
            own_score=own,
        )


def challenge_problems(challenge: Challenge, constraints: Constraints) -> list[tuple[str, str]]:
    """(field, problem) for rules that claim more than mlra does: a rule naming a check
    that does not exist or a `[constraints]` field the task leaves unset, an
    `own_metric` without `differs`."""
    problems: list[tuple[str, str]] = []
    known_constraints = set(Constraints.model_fields)
    set_constraints = set(constraints.model_dump(exclude_defaults=True))
    for i, rule in enumerate(challenge.rules):
        field = f"challenge.rules.{i}.checks"
        for name in rule.checks:
            if name in known_constraints:
                if name not in set_constraints:
                    problems.append(
                        (field, f"{name!r} is a [constraints] field this task leaves unset")
                    )
            elif name not in EVALUATOR_CHECKS:
                known = ", ".join(sorted(known_constraints | set(EVALUATOR_CHECKS)))
                problems.append((field, f"{name!r} is not a check mlra has (known: {known})"))
    if challenge.own_metric and not challenge.differs:
        problems.append(
            (
                "challenge.own_metric",
                "is reported beside mlra's score only where `differs` says why",
            )
        )
    return problems


def quote_rules(violations: list[str], challenge: Challenge) -> list[str]:
    """Each violation, prefixed with the challenge rule it breaks where a checked rule
    names the check that found it, so the refusal says the rule in its own words."""
    by_check: dict[str, ChallengeRule] = {}
    for rule in challenge.rules:
        for name in rule.checks:
            if rule.status == "checked" or name not in by_check:
                by_check[name] = rule
    out: list[str] = []
    for violation in violations:
        key = violation.split(":", 1)[0].strip()
        rule = by_check.get(key)
        if rule is None or violation.startswith("breaks the challenge's rule"):
            out.append(violation)
        else:
            out.append(f'breaks the challenge\'s rule "{rule.text}" ({rule.source}): {violation}')
    return out


def rule_lines(challenge: Challenge) -> list[str]:
    """The rules as `mlra tasks show` lists them: ✓ checked, how; · trusted, why."""
    if not challenge.rules and not challenge.differs:
        return []
    n_checked = sum(r.status == "checked" for r in challenge.rules)
    head = f"challenge:  {challenge.name}" if challenge.name else "challenge:"
    lines = [head + (f" ({challenge.source})" if challenge.source else "")]
    if challenge.metric_note:
        lines.append(f"  its metric: {challenge.metric_note.strip()}")
    if challenge.differs:
        lines.append(f"  mlra differs: {challenge.differs.strip()}")
    lines.append(
        f"Rules ({n_checked} checked by mlra, {len(challenge.rules) - n_checked} trusted):"
    )
    for rule in challenge.rules:
        mark = "✓ checked" if rule.status == "checked" else "· trusted"
        if rule.status == "trusted" and rule.checks:
            mark += " (partly checked)"
        lines.append(f"  {mark}: {rule.text.strip()} [{rule.source}]")
        lines.append(f"      {'how' if rule.status == 'checked' else 'why'}: {rule.how.strip()}")
    return lines


def prompt_section(challenge: Challenge) -> str:
    """What the agent's prompt says of the rules: which the grader checks (a submission
    breaking one gets no score) and which are left to the agent's honesty."""
    if not challenge.rules:
        return ""
    checked = [r for r in challenge.rules if r.status == "checked"]
    trusted = [r for r in challenge.rules if r.status == "trusted"]
    parts = []
    if checked:
        parts.append(
            "Checked before scoring (a submission that breaks one gets no score):\n"
            + "\n".join(f"- {r.text.strip()} ({r.how.strip()})" for r in checked)
        )
    if trusted:
        parts.append(
            "Not checkable here (or only in part), and trusted to you:\n"
            + "\n".join(
                f"- {r.text.strip()}" + (f" (in part: {r.how.strip()})" if r.checks else "")
                for r in trusted
            )
        )
    return "\n\n".join(parts)
