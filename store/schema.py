"""The schema as forward-only migrations: (version, statements). Never edit a released migration; append.

JSON columns hold text (readable with sqlite3's json_extract). Times are UNIX seconds (REAL).
Every index serves a query the UI or the worker makes; keyset pagination walks (run_id, <key>, id).
"""

from __future__ import annotations

_V1 = [
    """CREATE TABLE schema_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL,
        migrated REAL NOT NULL)""",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY, name TEXT NOT NULL, model TEXT NOT NULL, config TEXT NOT NULL,
        harness TEXT, status TEXT NOT NULL DEFAULT 'created', status_reason TEXT, error TEXT,
        created REAL NOT NULL, updated REAL NOT NULL,
        worker_pid INTEGER, worker_host TEXT, lock_token TEXT, heartbeat REAL)""",
    """CREATE TABLE tasks (
        id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, dataset TEXT NOT NULL, split TEXT NOT NULL,
        prompt TEXT NOT NULL, expected_tool TEXT, expected_args TEXT, tools TEXT, extra TEXT)""",
    "CREATE INDEX tasks_dataset_split ON tasks (dataset, split)",
    """CREATE TABLE verifiers (
        id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES runs(id), name TEXT NOT NULL,
        version INTEGER NOT NULL, code TEXT NOT NULL, sha256 TEXT NOT NULL, created REAL NOT NULL,
        note TEXT, active INTEGER NOT NULL DEFAULT 0, dry_run TEXT, UNIQUE (run_id, name, version))""",
    "CREATE UNIQUE INDEX verifiers_one_active ON verifiers (run_id) WHERE active = 1",
    """CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id), step INTEGER NOT NULL,
        kind TEXT NOT NULL, path TEXT NOT NULL, created REAL NOT NULL, metrics TEXT,
        promoted INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX checkpoints_run_step ON checkpoints (run_id, step)",
    """CREATE TABLE trajectories (
        id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id), step INTEGER NOT NULL,
        split TEXT NOT NULL, task_id INTEGER REFERENCES tasks(id), group_idx INTEGER NOT NULL DEFAULT 0,
        sample_idx INTEGER NOT NULL DEFAULT 0, messages TEXT NOT NULL, completion TEXT NOT NULL,
        tool_calls TEXT, reward REAL, reward_parts TEXT, explanation TEXT,
        verifier_id INTEGER REFERENCES verifiers(id), advantage REAL, prompt_tokens INTEGER,
        tokens INTEGER, truncated INTEGER NOT NULL DEFAULT 0, latency REAL, error TEXT,
        checkpoint_id INTEGER REFERENCES checkpoints(id), eval_id INTEGER,
        superseded INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL)""",
    # Keyset pages and live follow: newest rows of a run, by id, optionally within a step/task/verifier.
    "CREATE INDEX traj_run_id ON trajectories (run_id, id)",
    "CREATE INDEX traj_run_step ON trajectories (run_id, step, id)",
    "CREATE INDEX traj_run_task ON trajectories (run_id, task_id, id)",
    "CREATE INDEX traj_run_reward ON trajectories (run_id, reward, id)",
    "CREATE INDEX traj_run_verifier ON trajectories (run_id, verifier_id, id)",
    "CREATE INDEX traj_eval ON trajectories (eval_id) WHERE eval_id IS NOT NULL",
    """CREATE TABLE steps (
        id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id), step INTEGER NOT NULL,
        metrics TEXT NOT NULL, created REAL NOT NULL, superseded INTEGER NOT NULL DEFAULT 0)""",
    "CREATE UNIQUE INDEX steps_run_step_live ON steps (run_id, step) WHERE superseded = 0",
    """CREATE TABLE evals (
        id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id), step INTEGER NOT NULL,
        checkpoint_id INTEGER REFERENCES checkpoints(id), tasks TEXT NOT NULL, mode TEXT NOT NULL,
        is_baseline INTEGER NOT NULL DEFAULT 0, metrics TEXT NOT NULL, created REAL NOT NULL)""",
    "CREATE INDEX evals_run_step ON evals (run_id, step)",
    """CREATE TABLE commands (
        id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id), kind TEXT NOT NULL,
        payload TEXT, status TEXT NOT NULL DEFAULT 'pending', created REAL NOT NULL,
        claimed REAL, handled REAL, result TEXT)""",
    "CREATE INDEX commands_pending ON commands (run_id, id) WHERE status = 'pending'",
    """CREATE TABLE labels (
        id INTEGER PRIMARY KEY, trajectory_id INTEGER NOT NULL REFERENCES trajectories(id),
        verdict TEXT NOT NULL CHECK (verdict IN ('good', 'bad')), note TEXT, created REAL NOT NULL)""",
    "CREATE INDEX labels_trajectory ON labels (trajectory_id, id)",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES runs(id), kind TEXT NOT NULL,
        message TEXT NOT NULL, data TEXT, created REAL NOT NULL)""",
    "CREATE INDEX events_run ON events (run_id, id)",
    """CREATE TABLE dry_runs (
        id INTEGER PRIMARY KEY, verifier_id INTEGER NOT NULL REFERENCES verifiers(id),
        trajectory_id INTEGER NOT NULL REFERENCES trajectories(id), old_reward REAL, new_reward REAL,
        new_parts TEXT, explanation TEXT, error TEXT)""",
    "CREATE INDEX dry_runs_verifier ON dry_runs (verifier_id, id)",
]

# v2: evals of a policy past the checkpoint a run resumed from are superseded too, like its trajectories.
_V2 = ["ALTER TABLE evals ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0"]

# v3: each episode's classification by the engine (valid_json, parsed, correct_tool, correct_args, success,
# unsafe as JSON): "success" is the eval's rule, stored with the row, not re-derived from the reward.
_V3 = ["ALTER TABLE trajectories ADD COLUMN outcome TEXT"]

# v4: shared prompt prefixes stored once (the harness system prompt was ~60% of a row's bytes), and each
# episode's exact token ids and sampling log-probs (store/tokens.py), so nothing downstream re-tokenises.
# `trajectories.messages` holds the messages after the prefix; `trajectory_messages` shows both in sqlite3.
_V4 = [
    """CREATE TABLE prefixes (
        hash TEXT PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('messages', 'tokens')), body NOT NULL,
        created REAL NOT NULL)""",
    "ALTER TABLE trajectories ADD COLUMN prefix TEXT REFERENCES prefixes(hash)",
    "ALTER TABLE trajectories ADD COLUMN token_trace BLOB",
    """CREATE VIEW trajectory_messages AS
        SELECT t.id, t.run_id, t.step, p.body AS prefix_messages, t.messages
        FROM trajectories t LEFT JOIN prefixes p ON p.hash = t.prefix""",
]

MIGRATIONS: list[tuple[int, list[str]]] = [(1, _V1), (2, _V2), (3, _V3), (4, _V4)]
SCHEMA_VERSION = MIGRATIONS[-1][0]
