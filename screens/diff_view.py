"""A coloured unified diff between two versions of verifier code."""

from __future__ import annotations

import difflib

from rich.text import Text


def diff_text(old: str, new: str, old_name: str = "old", new_name: str = "new") -> Text:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name, lineterm=""))
    if not lines:
        return Text(f"{old_name} and {new_name} are identical", style="dim")
    out = Text()
    for line in lines:
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("@@"):
            style = "cyan"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        else:
            style = "dim"
        out.append(line + "\n", style=style)
    out.rstrip()
    return out
