"""The console's panes: each renders part of the run from its events."""
