"""math-autoformalization is gradable: Lean and the Lean project reach the sandboxed
evaluator, its files go where it may write, and only an answer that states the
problem's theorem can succeed.

Lean 3 is not installed here, so a stand-in `lean` (a script the tests write) plays
it: it accepts a file unless a proof says FAIL, an `example : T := @N` names no
theorem N of type T, a line at the margin begins with no command (prose), or an
`import` cannot be found because it was not run in a project with `leanpkg.path`;
errors come with their line, as Lean's do. Where a real Lean 3 is on PATH, the last test checks
the same answers with it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mlra.tasks import readiness
from mlra.tasks.evaluators.base import evaluation_env, evaluation_spec
from mlra.tasks.evaluators.host_tools import host_tools, resolve_command
from mlra.tasks.grading import grade
from mlra.tasks.spec import BUILTIN_TASKS_DIR, load_task
from tests.tasks.standins import REFERENCE, lean_toolchain
from tests.tasks.standins import graded_math_copy as _graded_copy
from tests.tasks.test_benchmark_tasks import _claims, _llama


def _script() -> ModuleType:
    path = BUILTIN_TASKS_DIR / "math-autoformalization" / "hidden" / "evaluate.py"
    spec = importlib.util.spec_from_file_location("autoformalization_evaluate", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def lean_setup(tmp_path: Path) -> tuple[Path, Path]:
    """(the stand-in toolchain's `bin/lean`, a Lean project) outside the system folders."""
    return lean_toolchain(tmp_path)


# --- the statement check -------------------------------------------------------------------


def test_the_reference_theorem_is_read_as_a_pi_type() -> None:
    m = _script()
    assert m.statement(REFERENCE, "algebra_p1") == (
        "algebra_p1",
        "∀ (x : ℝ) (h₀ : x + 1 = 3), x = 2",
    )
    assert m.statement("theorem t : (1 : ℕ) + 1 = 2 := rfl") == ("t", "(1 : ℕ) + 1 = 2")
    helper_then_main = "lemma aux (n : ℕ) : n + 0 = n := rfl\ntheorem main : 2 = 2 := rfl"
    assert m.statement(helper_then_main, None) == ("main", "2 = 2")
    assert m.statement(helper_then_main, "aux") == ("aux", "∀ (n : ℕ), n + 0 = n")
    assert m.statement("-- no theorem here", None) is None
    source = m.checked_source("theorem t : 2 = 2 := rfl\n\n", ("t", "2 = 2"))
    assert source == "theorem t : 2 = 2 := rfl\n\nexample : 2 = 2 := @t\n"


CHEATS = {
    # Each would let Lean accept the answer and its check without a proof of the
    # problem's statement as the reference states it.
    "theorem t : false := sorry": "`sorry`",
    "theorem t : false := by admit": "`admit`",
    "axiom cheat : false\ntheorem t : false := cheat": "an axiom",
    "@[simp] constant c : false": "an axiom or constant",
    "meta constant c : false": "an axiom or constant",
    # Lean stops at #exit: the check appended after the answer is never read.
    "#exit": "`#exit`",
    "theorem t : 1 = 1 := rfl\n/- the check below is inside this comment": "unterminated comment",
    # Meta code adds an axiom under any name without the word `axiom`:
    "run_cmd tactic.add_decl d": "meta code",
    "run_cmd do e ← tactic.get_env, tactic.set_env e": "meta code",
    "theorem t : false := begin tactic.updateex_env (λ e, e.add d), end": "meta code",
    "meta def m : tactic unit := tactic.skip": "meta code",
    "#eval tactic.trace 1": "meta code",
    "@[user_command] def c : unit := ()": "meta code",
    "theorem t : false := by do d ← pure (declaration.ax `x [] e), skip": "meta code",
    # What makes the check's own statement mean something else:
    "local notation `x = 2` := true": "a notation",
    "notation `ℝ` := unit": "a notation",
    "infix ` + `:65 := λ a b, a": "a notation",
    "reserve infix ` ⊕⊕ `:50": "a notation",
    "precedence `+`:1": "a notation",
    'localized "notation `ℝ` := unit" in cheat\nopen_locale cheat': "`localized`",
    "instance weird : has_add ℕ := ⟨λ a b, 0⟩": "an instance",
    "local attribute [instance, priority 10000] weird_add": "an instance",
    "@[instance] def w : has_one ℕ := ⟨0⟩": "an instance",
    "export nat (succ)": "an alias",
    "open nat (renaming succ → prime)": "an alias",
    "section\nparameter h : false\ntheorem t : 1 = 2 := h.elim": "`parameter`",
    "variables (h : false)\ninclude h": "`include`",
}


def test_answers_that_could_cheat_the_check_are_refused_before_lean_with_a_reason() -> None:
    m = _script()
    for bad, why in CHEATS.items():
        found = m.refusal(bad)
        assert found is not None and why in found, (bad, found)
    for fine in (
        "theorem constant_coeff_zero : 1 = 1 := rfl",
        "lemma is_prefix : true := trivial",
        "theorem t : 1 = 1 := by apply_instance",  # `apply_instance` is not `instance`
        "-- no sorry here: a comment\ntheorem t : 1 = 1 := rfl /- nor axiom -/",
        "/- nested /- comment -/ still one -/ theorem t : 1 = 1 := rfl",
        "open_locale big_operators\nopen real\nvariables (x : ℝ)",
        "lemma metaphor_free : true := trivial",
        "local attribute [instance] classical.prop_decidable\ntheorem t : 1 = 1 := rfl",
    ):
        assert m.refusal(fine) is None, fine


def test_an_answer_may_not_define_a_name_the_statement_uses() -> None:
    """A `def prime` of the answer's own would make `prime p` in the check mean it."""
    m = _script()
    statement = "∀ (p : ℕ) (h : nat.prime p), 2 ≤ p"
    found = m.refusal("def prime (n : ℕ) : Prop := true\ntheorem t : 1 = 1 := rfl", statement)
    assert found is not None and "a definition of `prime`" in found
    found = m.refusal("@[reducible] def foo.nat.prime := true", statement)
    assert found is not None and "`foo.nat.prime`" in found
    assert m.refusal("def helper (n : ℕ) : ℕ := n + 1", statement) is None


def test_the_prompt_gives_the_theorem_name_and_any_name_is_checked() -> None:
    """The challenge's rows give `name` as an input beside the informal statement and
    proof (the formal proof is the answer): the prompt shows it. An answer that states
    the theorem under another name is checked under that name."""
    m = _script()
    prompt = m.PROMPT.format(
        name="algebra_p1", informal_statement="x + 1 = 3 so x = 2", informal_proof="Subtract."
    )
    assert prompt.startswith("Theorem name: algebra_p1\n")
    assert prompt.endswith("Formal statement and proof in Lean 3:\n")
    assert m.answer_theorem(REFERENCE, "algebra_p1") == "algebra_p1"
    other = REFERENCE.replace("algebra_p1", "my_version")
    assert m.answer_theorem(other, "algebra_p1") == "my_version"
    helper = "lemma aux : true := trivial\ntheorem main : 1 = 1 := rfl\n"
    assert m.answer_theorem(helper, "p") == "main"
    assert m.answer_theorem("-- theorem fake : true\n", "p") == "p"


def test_the_lean_time_plan_fits_the_budget_in_the_worst_case() -> None:
    """199 held-out problems: 120 s each would take 6.6 h one at a time, past the
    evaluator's 6 h. The limit shrinks so every answer running out of time still fits
    the Lean budget (2 h by default), workers at once."""
    m = _script()
    assert m.lean_plan(199, 8, 120, 7200) == 120  # 25 rounds of 120 s: 50 min
    assert m.lean_plan(199, 1, 120, 7200) == pytest.approx(7200 / 199)  # about 36 s
    for problems in (1, 7, 199, 200, 1000):
        for workers in (1, 2, 3, 8, 16):
            limit = m.lean_plan(problems, workers, 120, 7200)
            rounds = -(-problems // workers)
            assert 0 < limit <= 120 and rounds * limit <= 7200 + 1e-9
    assert 1 <= m.default_workers() <= 8


def test_only_an_answer_stating_the_theorem_compiles(
    tmp_path: Path, lean_setup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run in the project (where leanpkg.path is), the files written to scratch, the
    project left as it was; empty, unrelated, wrong and failing answers score 0."""
    m = _script()
    lean, project = lean_setup
    log = tmp_path / "lean-calls.jsonl"
    monkeypatch.setenv("STANDIN_LEAN_LOG", str(log))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    before = sorted(p.name for p in project.iterdir())
    target = m.statement(REFERENCE, "algebra_p1")
    renamed = REFERENCE.replace("(x : ℝ)", "(y : ℝ)").replace("x + 1", "y + 1")

    def judged(answer: str) -> bool:
        return m.compiles(str(lean), project, m.checked_source(answer, target), 10, scratch)

    assert judged(REFERENCE)
    assert not judged("")  # Lean accepts an empty file; the statement check does not
    assert not judged("theorem unrelated : 1 = 1 := rfl")
    assert not judged(REFERENCE.replace("x = 2", "x = 3"))  # another statement
    assert not judged(REFERENCE.replace("linarith", "FAIL"))  # a proof Lean rejects
    assert not judged(REFERENCE.replace("linarith,", "sorry,"))
    assert not judged(renamed)  # the stand-in is stricter than Lean (alpha-equivalence)
    assert judged(REFERENCE.replace("algebra_p1", "x_eq_two"))  # its own name is checked
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 7  # the `sorry` answer never reached Lean
    assert {c["cwd"] for c in calls} == {str(project)}
    assert all(Path(c["file"]).parent == scratch for c in calls)
    assert sorted(p.name for p in project.iterdir()) == before
    assert list(scratch.iterdir()) == []

    # Outside the project (as the old grader ran it when given none) the imports fail.
    assert not m.compiles(str(lean), scratch, m.checked_source(REFERENCE, target), 10, scratch)


INFORMAL = "Let x be a real number with x + 1 = 3. Show that x = 2."
DEGENERATE = {
    # answer: (counted as formalized, the reason the grader's log gives)
    "": (False, "the statement check: answer.lean:3:0: error: unknown identifier 'algebra_p1'"),
    INFORMAL: (False, "Lean: answer.lean:1:0: error: unknown command 'Let'"),
    REFERENCE.replace("linarith,", "sorry,"): (False, "refused: `sorry`"),
    "theorem algebra_p1 : true := trivial\n": (False, "the statement check: "),
    "import data.real.basic\ntheorem algebra_p1 (x : ℝ) (h₀ : x + 1 = 3) : true := trivial\n": (
        False,
        "the statement check: answer.lean:4:0: error: type mismatch",
    ),
    "#exit\n" + REFERENCE: (False, "refused: `#exit`"),
    REFERENCE: (True, "states and proves the theorem"),
    REFERENCE.replace("algebra_p1", "x_is_two"): (True, "states and proves the theorem"),
}
"""Lean accepts five of these on their own (the empty file, the two `true` theorems and
the two right answers): MLRB's "Lean that compiled", reported as lean_accepts_rate."""


def test_degenerate_answers_score_0_through_the_whole_script(
    tmp_path: Path,
    lean_setup: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The script end to end (the model's generation replaced by fixed answers, the
    stand-in Lean as the grader finds it): each problem is the same reference, each
    answer one of DEGENERATE, and one more problem the model's time ran out before
    (graded as an empty answer); only the two that state and prove it count, so the
    compile rate is 2/9, and the grader's log says why each other one failed."""
    m = _script()
    lean, project = lean_setup
    monkeypatch.setenv("MLRA_COMMAND_LEAN", str(lean))
    answers = [*DEGENERATE, ""]  # the last: a problem the model did not reach in time
    rows = [
        {"name": "algebra_p1", "informal_statement": INFORMAL, "informal_proof": "Subtract 1.",
         "formal_proof": REFERENCE}
        for _ in answers
    ]  # fmt: skip
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prompts: list[str] = []

    def fixed_answers(
        model_dir: Path, given: list[dict[str, str]], max_new_tokens: int, budget: float
    ) -> list[str | None]:
        assert budget == 12600  # 3.5 h: with 2 h of Lean, inside the evaluator's 6 h
        prompts.extend(m.PROMPT.format(**p) for p in given)
        return [*answers[:-1], None]  # the last problem not reached in time

    monkeypatch.setattr(m, "generate", fixed_answers)
    out = tmp_path / "out.json"
    args = [str(tmp_path / "model"), str(tmp_path), str(out), "--problems", str(problems)]
    assert m.main([*args, "--lean-project", str(project), "--lean-workers", "3"]) == 0
    result = json.loads(out.read_text())
    assert result["score"] == pytest.approx(2 / 9)
    metrics = result["metrics"]
    assert metrics["problems"] == 9 and metrics["refused_answers"] == 2
    assert metrics["unanswered_in_time"] == 1
    assert metrics["lean_accepts_rate"] == pytest.approx(6 / 9)  # "" compiles
    assert metrics["lean_workers"] == 3 and metrics["lean_seconds_per_answer"] == 120
    assert all(p.startswith("Theorem name: algebra_p1\n") for p in prompts)
    # Each answer's verdict, in order, in the grader's log (stderr).
    verdicts = [line.split(": ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    assert len(verdicts) == len(answers)
    for answer, verdict in zip(answers, verdicts, strict=True):
        passes, why = DEGENERATE[answer]
        assert (verdict == "states and proves the theorem") == passes, (answer, verdict)
        assert verdict.startswith(why), (answer, verdict)


def test_a_model_out_of_generation_time_answers_nothing_more(tmp_path: Path) -> None:
    """The real generation, with the tiny stand-in model: a budget spent (here before
    the first problem) leaves the rest unanswered, where no budget answers them all."""
    m = _script()
    model = _llama(tmp_path / "tiny")
    row = {"name": "p", "informal_statement": "s", "informal_proof": "p", "formal_proof": ""}
    assert m.generate(model, [row, row], 2, budget=0) == [None, None]
    answered = m.generate(model, [row, row], 2, budget=600)
    assert len(answered) == 2 and all(isinstance(a, str) for a in answered)


def test_an_answer_lean_cannot_finish_in_time_counts_as_not_compiled(
    tmp_path: Path, lean_setup: tuple[Path, Path]
) -> None:
    m = _script()
    _, project = lean_setup
    slow = tmp_path / "slow-lean"
    slow.write_text("#!/bin/sh\nexec sleep 600\n")
    slow.chmod(0o755)
    target = m.statement(REFERENCE, "algebra_p1")
    assert m.judge(str(slow), project, REFERENCE, target, 1, tmp_path) == "Lean ran out of its 1 s"
    assert list(tmp_path.glob("*.lean")) == []  # its file is removed all the same


def test_without_lean_3_or_a_project_it_says_which() -> None:
    m = _script()
    assert m.lean_problem(None, Path(".")) == m.NO_LEAN
    assert m.lean_problem(sys.executable, None) == m.NO_PROJECT
    problem = m.lean_problem(shutil.which("true") or "/bin/true", Path("."))
    assert problem is not None and "is not Lean 3" in problem


# --- Lean and the project reach the sandboxed evaluator -------------------------------------


def test_readiness_and_grading_find_lean_the_same_way(
    tmp_path: Path, lean_setup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    lean, project = lean_setup
    task = load_task(BUILTIN_TASKS_DIR / "math-autoformalization")
    monkeypatch.setenv("PATH", f"{tmp_path / 'empty'}")
    monkeypatch.delenv("LEAN_PROJECT", raising=False)
    assert host_tools(task).problems == [
        "its evaluator needs $LEAN_PROJECT, a folder with leanpkg.path; it is not set",
        "its evaluator needs the `lean` command; it is not installed",
    ]
    assert set(host_tools(task).problems) <= set(readiness.blockers(task))

    monkeypatch.setenv("PATH", f"{lean.parent}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("LEAN_PROJECT", str(project))
    tools = host_tools(task)
    assert tools.problems == []
    assert tools.env == {"LEAN_PROJECT": str(project), "MLRA_COMMAND_LEAN": str(lean)}
    assert tools.read_only == [project, lean.parent.parent]  # the toolchain, lib included
    env = evaluation_env(task)
    assert env["MLRA_COMMAND_LEAN"] == str(lean) and env["LEAN_PROJECT"] == str(project)
    shown = evaluation_spec(task, tmp_path, env).read_only
    assert project in shown and lean.parent.parent in shown
    assert not any("lean" in p for p in readiness.blockers(task))


def test_elans_proxy_resolves_to_the_projects_toolchain(
    tmp_path: Path, lean_setup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """~/.elan/bin/lean reads ~/.elan, which the sandbox does not show: the host asks
    elan (in the project, whose leanpkg.toml picks the toolchain) for the real binary."""
    lean, project = lean_setup
    elan_bin = tmp_path / "elan-home" / "bin"
    elan_bin.mkdir(parents=True)
    (elan_bin / "lean").write_text("#!/bin/sh\nexit 1\n")
    (elan_bin / "elan").write_text(
        f'#!/bin/sh\n[ "$1 $2" = "which lean" ] && [ -f leanpkg.path ] && echo {lean}\n'
    )
    for f in elan_bin.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", str(elan_bin))
    assert resolve_command("lean", cwd=project) == lean
    assert resolve_command("lean") == elan_bin / "lean"  # elan cannot say: the proxy as found


async def test_lean_and_the_project_reach_the_sandboxed_evaluator(
    tmp_path: Path, lean_setup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lean outside the system folders and the project named by $LEAN_PROJECT are found
    inside the grader's sandbox: the script gets past its Lean 3 check (it runs
    `lean --version` there) and stops at the next one, having no problem to grade."""
    lean, project = lean_setup
    monkeypatch.setenv("PATH", f"{lean.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LEAN_PROJECT", str(project))
    row = {"name": "x", "informal_statement": "s", "informal_proof": "p", "formal_proof": "none"}
    task = load_task(_graded_copy(tmp_path, [row]))
    workspace = tmp_path / "workspace"
    _claims(workspace / "submission", 0.001)  # never loaded: the script stops before
    _, finished = await grade(task, workspace, None, tmp_path / "eval")
    assert not finished.ok and finished.error is not None
    assert finished.error.endswith("no reference states a theorem this script can read")
    assert finished.isolation == "bwrap" or shutil.which("bwrap") is None


@pytest.mark.slow
async def test_grading_runs_the_stand_in_inside_the_sandbox_and_unrelated_answers_score_0(
    tmp_path: Path, lean_setup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through mlra's grading (a fresh confined process, the project read-only there):
    Lean and the project are found, and a model that writes no statement of the
    theorem scores 0, where a Lean that accepts anything once gave it 1."""
    lean, project = lean_setup
    monkeypatch.setenv("PATH", f"{lean.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LEAN_PROJECT", str(project))
    rows = [
        {"name": "algebra_p1", "informal_statement": "s", "informal_proof": "p", "formal_proof": REFERENCE},
        {"name": "t2", "informal_statement": "s", "informal_proof": "p", "formal_proof": "theorem t2 : 2 = 2 := rfl"},
        {"name": "bad", "informal_statement": "s", "informal_proof": "p", "formal_proof": "no theorem"},
    ]  # fmt: skip
    folder = _graded_copy(tmp_path, rows)
    task = load_task(folder)
    workspace = tmp_path / "workspace"
    _llama(workspace / "submission")
    _, finished = await grade(task, workspace, None, tmp_path / "eval")
    assert finished.ok, finished.error
    assert finished.score == 0.0
    assert finished.metrics["problems"] == 2.0
    assert finished.metrics["unreadable_references"] == 1.0
    assert sorted(p.name for p in project.iterdir()) == ["leanpkg.path"]
    # The challenge's rules and its own measure (Lean accepting the answer alone) beside.
    rules = finished.rules
    assert rules is not None and (rules.checked, rules.trusted) == (3, 3)
    assert rules.own_metric == "lean_accepts_rate"
    assert rules.own_score == finished.metrics["lean_accepts_rate"]


# --- a real Lean 3, where one is installed ---------------------------------------------------


def _real_lean_3() -> str | None:
    found = shutil.which("lean")
    if found is None:
        return None
    try:
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found if "Lean (version 3." in out.stdout + out.stderr else None


@pytest.mark.skipif(_real_lean_3() is None, reason="Lean 3 is not installed here")
def test_a_real_lean_3_judges_the_same_answers(tmp_path: Path) -> None:
    """Core Lean only (no mathlib import), in a project whose leanpkg.path names only the
    built-in library: the reference passes, renamed variables and another theorem name
    pass (Lean compares types up to alpha-equivalence), an empty, unrelated or wrong
    answer does not."""
    m = _script()
    lean = _real_lean_3()
    assert lean is not None
    project = tmp_path / "project"
    project.mkdir()
    (project / "leanpkg.path").write_text("builtin_path\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    reference = "theorem p (n : ℕ) (h : n = 2) : n + 1 = 3 :=\nbegin\n  subst h,\nend\n"
    target = m.statement(reference, "p")

    def judged(answer: str) -> bool:
        return m.judge(lean, project, answer, target, 120, scratch) is None

    assert judged(reference)
    assert judged(
        reference.replace("(n : ℕ) (h : n = 2)", "{k : ℕ} (hk : k = 2)")
        .replace("n + 1", "k + 1")
        .replace("subst h", "subst hk")
    )
    assert not judged("")
    assert not judged("theorem q : 1 = 1 := rfl")
    assert not judged(reference.replace("n + 1 = 3", "n + 1 = 4"))
    assert judged(reference.replace("theorem p", "theorem q"))  # its own name is checked
    assert not judged("#exit\n" + reference)  # refused: the check would never be read
