"""Bridges from other trainers into the workbench store. Each module imports its trainer lazily (an optional
extra): `workbench.integrations.trl` needs `pip install agent-workbench[trl]`."""
