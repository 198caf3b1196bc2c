"""A step asked for while the run runs freely (`Controls.pause_after_action`, `n` in the
console, `mlra ctl RUN step`) ends the action in hand and no more: the model's turn and
the call it asks for, when asked during the turn; the call running, when asked during
it. The run then waits at the next boundary (the controller records that pause)."""

from __future__ import annotations

import asyncio

from mlra.agent.loop.controls import Controls, Decision


async def test_asked_during_the_models_turn_its_first_call_is_the_action_in_hand() -> None:
    controls = Controls()
    await controls.gate()  # the turn begins, running freely
    controls.pause_after_action()
    assert not controls.paused
    assert not controls.call_waits_for_step()  # the turn's call: part of the action
    await controls.hold()
    # The turn's next call, or the next turn: the boundary, where the run pauses.
    assert controls.call_waits_for_step()
    assert controls.step_used_up()


async def test_asked_during_a_call_the_next_action_waits() -> None:
    controls = Controls()
    await controls.gate()
    await controls.hold()  # the call runs
    controls.pause_after_action()
    assert controls.call_waits_for_step()  # a further call of the turn is the next action
    assert controls.step_used_up()  # and so is the next turn


async def test_on_a_step_already_it_changes_nothing() -> None:
    controls = Controls()
    controls.pause()
    controls.step()  # paused: one action
    await controls.gate()
    controls.pause_after_action()
    assert not controls.call_waits_for_step()
    await controls.hold()
    assert controls.step_used_up()


async def test_a_second_step_while_stepping_lets_no_further_action_through() -> None:
    controls = Controls()
    await controls.gate()
    await controls.hold()  # a call runs
    controls.pause()  # paused during it
    controls.step()  # `n`: one action is granted
    controls.pause_after_action()  # a second `n` before the call ends
    assert controls.call_waits_for_step()  # the turn's next call waits
    assert controls.step_used_up()  # and so does the next turn: no action more


async def test_a_second_step_at_the_gate_keeps_the_granted_action() -> None:
    controls = Controls()
    controls.pause()
    gate = asyncio.ensure_future(controls.gate())
    await asyncio.sleep(0)  # the agent waits at the gate
    controls.step()
    controls.pause_after_action()  # `n` twice: the granted action is the one in hand
    await asyncio.wait_for(gate, 1)


async def test_paused_during_the_turn_then_two_steps_end_after_its_first_call() -> None:
    controls = Controls()
    await controls.gate()  # the turn begins, running freely
    controls.pause()  # paused while the model answers
    controls.step()  # `n`: the turn's call is the one action
    controls.pause_after_action()  # `n` again while it is in hand
    assert not controls.call_waits_for_step()
    await controls.hold()  # the turn's first call runs
    assert controls.call_waits_for_step()  # its next call waits
    assert controls.step_used_up()


async def test_a_pause_and_resume_within_the_turn_leave_its_call_in_hand() -> None:
    controls = Controls()
    await controls.gate()  # the turn begins, running freely
    controls.pause()  # `p`
    controls.resume()  # Space
    controls.pause_after_action()  # `n`, all within the model's turn
    assert not controls.call_waits_for_step()  # the turn's call still runs
    await controls.hold()
    assert controls.call_waits_for_step()
    assert controls.step_used_up()


async def test_a_resume_and_a_step_in_one_tick_at_the_gate_pause_after_its_action() -> None:
    """Space then `n` handled back to back, before the waiting agent woke: the gate found
    no step granted and paused the run for good, with no pause recorded."""
    controls = Controls()
    controls.pause()
    gate = asyncio.ensure_future(controls.gate())
    await asyncio.sleep(0)  # the agent waits at the gate, paused
    controls.resume()
    controls.pause_after_action()
    await asyncio.wait_for(gate, 5)  # the action in hand goes through
    assert not controls.paused
    await controls.hold()  # its call
    assert controls.step_used_up()  # the boundary after it: the run pauses there


async def test_a_second_step_after_a_step_approved_a_call_lets_that_call_run() -> None:
    controls = Controls()
    await controls.gate()
    await controls.hold()  # the turn's first call ran
    controls.expect_decision("c2")  # its second call waits for approval
    controls.step()  # `n` at the approval: the step's action is that call
    controls.decide("c2", Decision("approve"))
    controls.pause_after_action()  # a second `n` before the call ran
    assert not controls.call_waits_for_step()  # the approved call runs
    await asyncio.wait_for(controls.hold(), 5)
    assert controls.step_used_up()  # and the run pauses after it
