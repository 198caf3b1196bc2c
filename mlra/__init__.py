"""mlra: a terminal console for ML research agents.

One package tree, a folder per concept, lowest first: `mlra.events` (the vocabulary),
`mlra.tools`, `mlra.tasks`, `mlra.agent`, `mlra.batch`, `mlra.console`
(docs/architecture.md).
"""

__version__ = "0.1.0"
