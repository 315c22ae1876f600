"""The calendar's compare rules live once: the world and every built-in verifier read the same time rule,
state keys and `norm`, so what the world accepts as a time is what the verifiers count as a match."""

import ast
from pathlib import Path

import pytest

from workbench.domains.calendar import compare, world
from workbench.domains.calendar.world import World
from workbench.types import ToolCall
from workbench.verifiers import binary, metrics, tool_call

ROOT = Path(__file__).resolve().parents[2] / "workbench"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("9:30", "09:30"),
        ("09:30", "09:30"),
        ("14:00:00", "14:00"),
        ("0:05", "00:05"),
        ("23:59", "23:59"),
        ("24:00", None),
        ("2 PM", None),
        ("14:60", None),
        ("14:00:30", None),
        ("", None),
    ],
)
def test_time_24h(text, want):
    assert compare.time_24h(text) == want


def test_norm_pads_times_folds_case_and_orders_dicts():
    assert compare.norm("  Team   SYNC ") == "team sync"
    assert compare.norm({"time": "9:30", "day": "Monday"}) == compare.norm(
        {"day": "monday", "time": "09:30:00"}
    )
    assert compare.norm(1) == compare.norm(1.0) and compare.norm(True) is True
    assert compare.norm(["A", "b"]) == ("a", "b")


def test_world_and_verifiers_share_one_rule():
    assert tool_call.norm is compare.norm and binary.norm is compare.norm and metrics.norm is compare.norm
    assert tool_call.STATE_KEYS is compare.STATE_KEYS and world.STATE_KEYS is compare.STATE_KEYS
    w = World()
    w.call(ToolCall("reminders.create", {"text": "x", "day": "Monday", "time": "9:05"}))
    assert w.reminders[0]["time"] == compare.time_24h("9:05") == "09:05"
    assert not w.call(ToolCall("reminders.create", {"text": "x", "day": "Monday", "time": "9 PM"}))["ok"]


def _module_level_copies(path: Path) -> list[str]:
    """What a module defines itself that belongs to compare: the 24-hour regex, STATE_KEYS, norm."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "norm":
            found.append("norm")
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id == "STATE_KEYS":
                    found.append(t.id)
    if "2[0-3]):([0-5]" in path.read_text(encoding="utf-8"):
        found.append("24-hour regex")
    return found


def test_the_compare_rules_exist_once():
    copies = {
        str(p.relative_to(ROOT)): c
        for p in sorted(ROOT.rglob("*.py"))
        if p.name != "compare.py" and (c := _module_level_copies(p))
    }
    assert copies == {}
