"""Dashboard panes and small widgets, one a file."""
