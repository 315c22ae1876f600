"""Schema v4: shared prompt prefixes stored once, exact token traces stored compactly; reads give back rows
exactly as inserted."""

import random
import sqlite3

import pytest

import store
from store import runs, tokens, trajectories
from tests.store_helpers import trajectory_row

HARNESS = "calendar.cancel_event(attendee, day)"  # a piece of the shared system prompt, with no JSON escapes


@pytest.fixture
def db(tmp_path):
    return store.open_db(tmp_path / "wb.db")


@pytest.fixture
def run_id(db):
    return runs.create_run(db, name="t", model="tiny", config={})


def trace(rng, turns=3, prefix=(7, 7, 7, 7)):
    """A token-in-token-out episode: each turn's prompt extends the last prompt + completion."""
    out, prompt = [], [*prefix, rng.randrange(500)]
    for _ in range(turns):
        comp = [rng.randrange(50_000) for _ in range(rng.randint(0, 6))]
        out.append(
            {
                "prompt_ids": list(prompt),
                "completion_ids": comp,
                "logprobs": [-rng.random() * 4 for _ in comp],
            }
        )
        prompt = prompt + comp + [rng.randrange(500) for _ in range(3)]
    return out


def close(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x["prompt_ids"] == y["prompt_ids"] and x["completion_ids"] == y["completion_ids"]
        assert x["logprobs"] == pytest.approx(y["logprobs"], abs=1e-6)


def test_trace_codec_roundtrips_extending_and_fresh_turns():
    rng = random.Random(1)
    t = trace(rng) + [{"prompt_ids": [1, 2], "completion_ids": [3], "logprobs": [-0.5]}]  # a re-rendered turn
    blob = tokens.encode_trace(t, b"k" * 16, 4)
    assert tokens.trace_prefix(blob) == b"k" * 16
    close(tokens.decode_trace(blob, [7, 7, 7, 7]), t)
    with pytest.raises(ValueError, match="logprobs"):
        tokens.encode_trace([{"prompt_ids": [1], "completion_ids": [2, 3], "logprobs": [0.0]}])


def test_rows_come_back_whole_and_the_prefix_is_stored_once(db, run_id):
    rng = random.Random(0)
    rows = [trajectory_row(run_id, 0, g, s, rng) for g in range(4) for s in range(8)]
    traces = [trace(rng) for _ in rows]
    for r, t in zip(rows, traces, strict=True):
        r.update(token_trace=t, token_prefix_len=4)
    ids = trajectories.insert_trajectories(db, rows)
    assert db.execute("SELECT kind, COUNT(*) FROM prefixes GROUP BY kind ORDER BY kind").fetchall() == [
        ("messages", 1),
        ("tokens", 1),
    ]
    stored = db.execute("SELECT messages FROM trajectories WHERE id = ?", [ids[0]]).fetchone()[0]
    assert HARNESS not in stored  # the row keeps only what follows the shared system prompt
    got = trajectories.get_trajectory(db, ids[5])
    assert got["messages"] == rows[5]["messages"]
    close(got["token_trace"], traces[5])
    members = trajectories.group_members(db, ids[9])
    assert [m["messages"] for m in members] == [r["messages"] for r in rows[8:16]]
    full = trajectories.trajectories_since(db, run_id, 0, full=True)
    assert [m["messages"] for m in full] == [r["messages"] for r in rows]
    assert all(
        "token_trace" not in r or not isinstance(r["token_trace"], bytes)
        for r in trajectories.trajectories_since(db, run_id, 0)
    )
    assert trajectories.last_trajectories(db, run_id, 1)[0]["messages"] == rows[-1]["messages"]
    # plain sqlite3 readers see both halves through the view
    pre, rest = db.execute(
        "SELECT prefix_messages, messages FROM trajectory_messages WHERE id = ?", [ids[0]]
    ).fetchone()
    assert HARNESS in pre and HARNESS not in rest


def test_prefix_messages_hint_shares_the_harness_example_too(db, run_id):
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "example"},
        {"role": "assistant", "content": "{}"},
        {"role": "user", "content": "task"},
    ]
    base = {"run_id": run_id, "step": 0, "split": "train", "completion": "x"}
    ids = trajectories.insert_trajectories(
        db,
        [
            {**base, "messages": msgs, "prefix_messages": 3},
            {**base, "messages": msgs[:1] + msgs[3:], "prefix_messages": 0},
        ],
    )
    assert (
        db.execute("SELECT messages FROM trajectories WHERE id = ?", [ids[0]]).fetchone()[0]
        == '[{"role":"user","content":"task"}]'
    )
    assert trajectories.get_trajectory(db, ids[0])["messages"] == msgs
    assert trajectories.get_trajectory(db, ids[1])["messages"] == msgs[:1] + msgs[3:]
    with pytest.raises(store.StoreError, match="prefix_messages"):
        trajectories.insert_trajectories(db, [{**base, "messages": msgs, "prefix_messages": 9}])
    with pytest.raises(store.StoreError, match="token_trace"):
        trajectories.insert_trajectories(db, [{**base, "messages": msgs, "token_trace": "ids"}])
    assert trajectories.count_trajectories(db, run_id) == 2  # a bad batch writes nothing


def test_fewer_bytes_per_row_than_storing_the_prefix_in_every_row(tmp_path):
    """The reason for v4: the shared system prompt dominated each row."""
    sizes = {}
    for hint in (None, 0):
        db = store.open_db(tmp_path / f"{hint}.db")
        run_id = runs.create_run(db, name="t", model="tiny", config={})
        rng = random.Random(0)
        rows = [trajectory_row(run_id, 0, g, s, rng) for g in range(32) for s in range(8)]
        if hint is not None:
            for r in rows:
                r["prefix_messages"] = hint  # 0: keep the whole conversation in the row, as v3 did
        trajectories.insert_trajectories(db, rows)
        sizes[hint] = db.execute("SELECT SUM(LENGTH(messages)) FROM trajectories").fetchone()[0]
    assert sizes[None] * 2 < sizes[0]


def test_v3_rows_read_unchanged_after_the_v4_migration(tmp_path):
    p = tmp_path / "v3.db"
    raw = sqlite3.connect(p)
    from store.schema import MIGRATIONS

    for _, statements in MIGRATIONS[:3]:
        for sql in statements:
            raw.execute(sql)
    raw.execute("INSERT INTO schema_version VALUES (1, 3, 0)")
    raw.execute("INSERT INTO runs (name, model, config, created, updated) VALUES ('old', 'm', '{}', 0, 0)")
    raw.execute(
        "INSERT INTO trajectories (run_id, step, split, messages, completion, created) VALUES "
        '(1, 0, \'train\', \'[{"role":"system","content":"S"},{"role":"user","content":"u"}]\', \'c\', 0)'
    )
    raw.commit()
    raw.close()
    db = store.open_db(p)
    assert store.db.schema_version(db) == 4
    row = trajectories.get_trajectory(db, 1)
    assert row["messages"][0] == {"role": "system", "content": "S"} and row["token_trace"] is None
