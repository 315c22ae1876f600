"""The typed, headless view layer: what the screens and `workbench report` read, and the rules they show (run
statuses and liveness, allowed actions, success, the best and promoted checkpoints, paired comparisons,
failure shares). The engine's own rules among them (promotion, the heartbeat's staleness limit, the error
budget's pause reason) live in `workbench.run` and are re-exported here.

Torch-free and Textual-free: it imports the store and the engine's pure modules only (an import-linter
contract and tests/engine/test_view.py hold it to that), so a UI process never loads a model to draw a table.
"""

from store import StoreError
from store.trajectories import TrajectoryFilter
from workbench.invocation import workbench_command
from workbench.launch import start_worker
from workbench.run.commands import (
    COMMANDS,
    CommandSpec,
    PayloadError,
    Sample,
    SetVerifier,
    check_command,
    command_spec,
    payload_dict,
)
from workbench.run.promotion import Promotion, baseline, on_split, promotion, sft_only, should_promote
from workbench.types import ToolCall
from workbench.verifiers import builtin_verifier_code
from workbench.view.evaluations import (
    EvalRow,
    Flag,
    baseline_value,
    best_eval,
    eval_flags,
    eval_points,
    eval_rows,
    metric_points,
    skill_rows,
)
from workbench.view.groups import GroupKey, RolloutGroup, group_key, group_rows
from workbench.view.records import (
    Checkpoint,
    Command,
    DryRunRow,
    Eval,
    Event,
    Label,
    Progress,
    Run,
    Step,
    Task,
    Trajectory,
    Turn,
    VerifierVersion,
)
from workbench.view.run_state import (
    ACTIONS,
    ERROR_BUDGET_PAUSE,
    LIVE_STATUSES,
    PAUSED_STATUSES,
    STALE_AFTER_S,
    STATUSES,
    Action,
    RunState,
    WorkerState,
    allowed,
    heartbeat_age,
    key_action,
    paused_by_errors,
    started_again,
    worker_state,
)
from workbench.view.scores import (
    FULL_REWARD,
    PART_NAMES,
    SORTS,
    FailureShares,
    TaskRow,
    TaskStats,
    failure_shares,
    part_series,
    policy_labels,
)
from workbench.view.store_view import (
    ORDERS,
    DryRunOutcome,
    Feed,
    Page,
    View,
    dry_run_control,
    effective_order,
    page_key,
)
from workbench.view.turns import turns

__all__ = [
    "COMMANDS", "CommandSpec", "PayloadError", "Sample", "SetVerifier", "check_command", "command_spec",
    "payload_dict",  # the command table (workbench.run)
    "ACTIONS", "ERROR_BUDGET_PAUSE", "FULL_REWARD", "LIVE_STATUSES", "ORDERS", "PAUSED_STATUSES", "PART_NAMES", "SORTS", "STALE_AFTER_S", "STATUSES", "Action",
    "Checkpoint", "Command", "DryRunOutcome", "DryRunRow", "Eval", "EvalRow", "Event", "FailureShares", "Feed", "Flag",
    "Label",
    "Page", "Progress", "Run", "RunState", "Step", "StoreError", "Task", "TaskRow", "TaskStats", "ToolCall", "Trajectory", "TrajectoryFilter",
    "Turn", "VerifierVersion", "View", "WorkerState", "allowed", "baseline", "baseline_value", "best_eval",
    "builtin_verifier_code", "dry_run_control", "effective_order", "eval_flags", "eval_points", "eval_rows", "failure_shares",
    "heartbeat_age", "key_action", "metric_points", "page_key", "part_series", "paused_by_errors", "sft_only", "should_promote",
    "Promotion", "on_split", "promotion", "skill_rows", "workbench_command",
    "GroupKey", "RolloutGroup", "group_key", "group_rows",
    "start_worker", "started_again", "turns", "worker_state",
    "policy_labels",
]
