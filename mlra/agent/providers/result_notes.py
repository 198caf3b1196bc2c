"""The words mlra puts in a call's result for the model to read: the user's edit or
rejection at a breakpoint, a call a resumed run found cut short. The loop writes them
(agent/loop/call_as_run.py, tool_step.py, call_decisions.py); the scripted demo
(demo_turns.py) reads them to act on the console's controls as an agent would. Here,
in the providers' wing, so both can.
"""

from __future__ import annotations

EDITED_NOTE = (
    "[The user edited this call before it ran: the call above shows the arguments it ran "
    "with. {whose} {asked}]\n"
)
"""`whose`: the model asked for the call, or the baseline's recipe had it (`edited_note`)."""
REJECTED = "The user rejected this call: "
"""The result of a call the user rejected at a breakpoint opens so, their message after."""
INTERRUPTED_OUTPUT = (
    "Interrupted: the run stopped (crashed, was killed or was stopped) while this call was "
    "running, and has been resumed. It may have run in part: check its effects before "
    "running it again."
)
"""The end of the result a resumed run gives a call that was running when it stopped."""
RUN_ENDED_UNDER = ") while this call was running]"
"""The end of the result of a call the run's end (a stop, its time limit) killed as it ran:
`[killed after 12.0 s: the run ended (it was stopped) while this call was running]`."""
