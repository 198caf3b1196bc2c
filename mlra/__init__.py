"""mlra: a terminal console for ML research agents.

The concept packages live at the top level of the repository and install as
`mlra.agent`, `mlra.tools`, `mlra.tasks` and `mlra.console`.
"""

__version__ = "0.1.0"
