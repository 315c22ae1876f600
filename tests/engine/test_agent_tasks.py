"""builtin:calendar_agent (issue 35): the generated multi-step family, its splits, its verifier, and its place
in a recipe (SFT never imitates a multi-step task; GRPO can be narrowed to them)."""

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import agent_fixed_sequences as fixed  # noqa: E402

from workbench import splits  # noqa: E402
from workbench.config import load_config  # noqa: E402
from workbench.domains.calendar import agent_tasks as at  # noqa: E402
from workbench.domains.calendar import single_turn_tasks as st  # noqa: E402
from workbench.envs import MultiTurnEnv  # noqa: E402
from workbench.learn.sft_native import env_sft_examples  # noqa: E402
from workbench.skills import breakdown, is_skill, skill_label, task_skills  # noqa: E402
from workbench.tasks import load_task_source  # noqa: E402
from workbench.types import Output, ToolCall  # noqa: E402
from workbench.verifiers import get_verifier  # noqa: E402
from workbench.verifiers.agent_state import reward  # noqa: E402
from workbench.verifiers.metrics import classify  # noqa: E402

# Changing the test split invalidates every number reported on it: update this only on purpose, and say so
# in docs/results.md. Validation too: recipe decisions compare runs on exactly these tasks.
TEST_SPLIT_SHA256 = "414b52c1175c99ef810e290d47b633d697d31ca4172bd3f8e010783630f3c527"
VALIDATION_SPLIT_SHA256 = "2376bdd8af28e435f57123277b01ec278f669467bb036593fe52bcf66743fb0c"

RECIPE = Path(__file__).resolve().parents[2] / "workbench" / "data" / "agent.yaml"


def test_the_test_and_validation_splits_are_frozen():
    assert at.content_hash(at.builtin_agent_tasks("test")) == TEST_SPLIT_SHA256
    assert at.content_hash(at.builtin_agent_tasks("held_out")) == VALIDATION_SPLIT_SHA256


def test_sizes_determinism_and_balanced_branches():
    sizes = {sp: len(at.builtin_agent_tasks(sp)) for sp in at.SPLITS}
    assert sizes == {"train": 280, "held_out": 140, "test": 140}
    assert at.builtin_agent_tasks("validation") == at.builtin_agent_tasks("held_out")
    assert at.generate("train") == at.generate("train")  # same tasks on every call
    for sp in at.SPLITS:
        tasks = at.generate(sp)
        assert len({t.id for t, _ in tasks}) == len(tasks)
        count = Counter((s["kind"], s["branch"]) for _, s in tasks)
        for kind in at.KINDS:
            if kind in at.BRANCHED:  # both outcomes, half each
                assert count[(kind, 0)] == count[(kind, 1)] == at.PER_KIND[sp] // 2
            else:
                assert count[(kind, 0)] == at.PER_KIND[sp]
        for t, s in tasks:  # every task needs a look before acting, and is multi-step
            assert t.expected_state is not None and t.initial_state is not None and t.tools is not None
            if s["kind"] in ("lookup", "ambiguity") and s["branch"] == 1:
                assert t.expected_state == t.initial_state  # busy / two matches: nothing changes


def _entities(split):
    tasks = at.builtin_agent_tasks(split)
    people = {e["attendee"] for t in tasks for e in t.initial_state["events"]}
    times = {e["time"] for t in tasks for e in t.initial_state["events"]}
    return tasks, people, times


def test_splits_are_disjoint_in_templates_names_cities_and_times():
    for kind, table in at.TEMPLATES.items():
        assert not set(table["train"]) & set(table["held_out"]), kind
        assert not (set(table["train"]) | set(table["held_out"])) & set(table["test"]), kind
    for table in (at.NAMES, at.CITIES, at.SUBJECTS, at.REMINDERS):
        assert not set(table["train"]) & set(table["held_out"])
        assert not (set(table["train"]) | set(table["held_out"])) & set(table["test"])
    single = {n for names in st.NAMES.values() for n in names} | {c for cs in st.CITIES.values() for c in cs}
    for sp in ("held_out", "test"):  # names and cities no single-call split has either
        assert not (set(at.NAMES[sp]) | set(at.CITIES[sp])) & single
    seen = {sp: _entities(sp) for sp in at.SPLITS}
    for sp in at.SPLITS:
        assert seen[sp][1] <= set(at.NAMES[sp])  # every person in a split's calendars is that split's
    minutes = {sp: {t[-2:] for t in seen[sp][2]} for sp in at.SPLITS}
    assert (
        not minutes["train"] & minutes["held_out"]
        and not (minutes["train"] | minutes["held_out"]) & minutes["test"]
    )
    prompts = {sp: {t.prompt for t in seen[sp][0]} for sp in at.SPLITS}
    assert not prompts["train"] & prompts["held_out"] and not prompts["test"] & (
        prompts["train"] | prompts["held_out"]
    )


def test_recover_tasks_start_after_a_failed_call_with_the_worlds_own_error():
    recover = [t for t in at.builtin_agent_tasks("held_out") if at.task_kind(t) == "recover"]
    kinds = Counter()
    for t in recover:
        user, bad, err = t.messages
        assert user == {"role": "user", "content": t.prompt} and bad["role"] == "assistant"
        body = json.loads(err["content"])
        assert err["role"] == "tool" and body["ok"] is False
        kinds["unknown attendee" if body["error"].startswith("no event with") else "bad day"] += 1
        msgs = MultiTurnEnv().start(t).messages  # the harness puts the history after its example
        assert msgs[-3:] == t.messages
    assert kinds == {"unknown attendee": 10, "bad day": 10}


@pytest.mark.parametrize("split", ["held_out", "test"])
def test_a_policy_that_reads_results_solves_every_task_through_the_real_episode(split):
    for task, slots in at.generate(split):
        out = fixed.run_reading(task, slots)
        score = reward(out, task)
        assert classify(out, task)["success"], (task.id, score.explanation)
        assert score.total == pytest.approx(1.0), (task.id, score.explanation)
        assert sum(score.parts.values()) == pytest.approx(score.total)


def test_no_fixed_sequence_beats_half_on_any_kind():
    """Sequences of up to two calls filled from the request alone (bench/agent_fixed_sequences.py runs three)."""
    tasks = at.generate("held_out")
    vocab = fixed.vocabulary("held_out")
    for kind in at.KINDS:
        mine = [(t, s) for t, s in tasks if s["kind"] == kind]
        best = fixed.best_fixed(mine, vocab, 2)["best"]
        assert best["success"] <= 0.5, (kind, best)


def _task(kind, split="held_out", branch=0):
    return next((t, s) for t, s in at.generate(split) if s["kind"] == kind and s["branch"] == branch)


def test_verifier_parts_unsafe_no_call_waste_and_single_calls():
    task, slots = _task("clear_day")
    bulk = fixed.run_calls(task, [ToolCall("calendar.delete_all_events", {})])
    s = reward(bulk, task)
    assert s.total == -1.0 and s.parts["unsafe"] == -1.0 and not classify(bulk, task)["success"]
    none = fixed.run_calls(task, [])
    assert reward(none, task).parts["valid_json"] == -1.0
    task, slots = _task("lookup", branch=1)  # busy: the right episode looks and books nothing
    looked = fixed.run_calls(task, [ToolCall("calendar.list_events", {"day": slots["day1"]})])
    assert reward(looked, task).total == 1.0 and classify(looked, task)["success"]
    booked = fixed.run_calls(
        task,
        [
            ToolCall("calendar.list_events", {"day": slots["day1"]}),
            ToolCall(
                "calendar.create_event",
                {"attendee": slots["name"], "day": slots["day1"], "time": slots["time"]},
            ),
        ],
    )
    s = reward(booked, task)
    assert s.parts["state"] == 0.0 and s.parts["tool"] == 0.3 and not classify(booked, task)["success"]
    # a failed call and a repeat are wasted; the episode still succeeds, at 0.9
    task, slots = _task("reschedule")
    right = fixed.run_reading(task, slots)
    calls = [
        ToolCall("calendar.cancel_event", {"attendee": "Nobody", "day": slots["day1"]}),
        *right.tool_calls[:1],
        *right.tool_calls,
    ]
    out = fixed.run_calls(task, [c for c in calls if c.name != "finish"])
    s = reward(out, task)
    assert s.parts["wasted"] == pytest.approx(-0.1) and s.total == pytest.approx(0.9), s.explanation
    assert classify(out, task)["success"]
    single = load_task_source("builtin:calendar", "held_out")[0]  # the seed verifier's path
    call = ToolCall(single.expected_tool, dict(single.expected_args))
    assert reward(Output("x", tool_calls=[call], executed=True), single).total == pytest.approx(1.0)
    assert get_verifier("agent_state").score(out, task).total == pytest.approx(
        0.9
    )  # registered, loads in process


def test_skills_name_each_kind_and_multi_step():
    tasks = at.builtin_agent_tasks("held_out")
    for t in tasks:
        assert task_skills(t) == ["multi_step", f"agent:{at.task_kind(t)}"]
    assert (
        all(is_skill(f"agent:{k}") for k in at.KINDS)
        and is_skill("multi_step")
        and not is_skill("agent:nope")
    )
    assert skill_label("agent:clear_day") == "multi-step: clear day"
    table = breakdown(tasks, {t.id: 1.0 if at.task_kind(t) == "lookup" else 0.0 for t in tasks})
    assert table["agent:lookup"] == {"n": 20, "success": 1.0} and table["multi_step"]["n"] == 140
    single = load_task_source("builtin:calendar", "held_out")
    assert not any("multi_step" in task_skills(t) for t in single)


def test_joined_sources_and_the_sft_warm_up_never_sees_a_multi_step_task():
    train = load_task_source("builtin:calendar+builtin:calendar_agent", "train")
    assert len(train) == 2000 + 280
    sft, rl = splits.stage_tasks(train, 0.0, ["multi_step"])
    assert sft and all(t.expected_state is None for t in sft) and len(sft) == 2000
    assert len(rl) == 280 and all(t.dataset == at.DATASET for t in rl)
    env = MultiTurnEnv()
    examples = env_sft_examples(env, sft[:20])
    assert all(json.loads(answer)["tool"] != "calendar.list_events" for _, answer, _ in examples)
    # each single call's gold episode, turn by turn: the call, then (after its tool result) finish
    assert len(examples) == 40
    for (first, call, _), (later, finish, prefill) in zip(examples[::2], examples[1::2], strict=True):
        assert later[: len(first)] == first and later[len(first)] == {"role": "assistant", "content": call}
        assert later[-1]["role"] == "tool" and json.loads(later[-1]["content"])["ok"] is True
        assert json.loads(finish)["tool"] == "finish" and finish.startswith(prefill)
    ep = env.start(sft[0])  # the finish turn is what ends the episode
    ep.step(examples[0][1][len(ep.prefill) :])
    assert ep.step(examples[1][1][len(ep.prefill) :]) is None and ep.end_reason == "finish"
    sft, _ = splits.stage_tasks(load_task_source("builtin:calendar_agent", "train"), 0.0, [])
    assert sft == []  # a multi-step family alone leaves the warm-up nothing to imitate
    with pytest.raises(FileNotFoundError, match="empty name"):
        load_task_source("builtin:calendar+", "train")
    with pytest.raises(ValueError, match="share task ids"):
        load_task_source("builtin:calendar_agent+builtin:calendar_agent", "train")


def test_look_questions_are_single_calls_whose_warm_up_episode_answers_with_the_listing():
    from workbench.domains.calendar import look_tasks as lt

    train, val = (load_task_source("builtin:calendar_look", sp) for sp in ("train", "validation"))
    assert (len(train), len(val)) == (240, 40) and train == lt.builtin_look_tasks("train")
    assert {t.template for t in train}.isdisjoint(t.template for t in val)
    names = {e["attendee"] for t in val for e in t.initial_state["events"]}
    seen = {e["attendee"] for t in train for e in t.initial_state["events"]} | {
        n for family in (st.NAMES, at.NAMES) for split in family.values() for n in split
    }
    assert names and names.isdisjoint(seen)
    for t in train + val:
        assert t.expected_tool == "calendar.list_events" and t.expected_state is None
        assert set(t.expected_args) <= {"day"}  # a day named in the request, or the whole calendar
    sft, rl = splits.stage_tasks(
        train + load_task_source("builtin:calendar_agent", "train"), 0.0, ["multi_step"]
    )
    assert sft == train and len(rl) == 280  # SFT learns the look; GRPO the multi-step family
    env = MultiTurnEnv()
    task = next(
        t for t in train if t.expected_args and "{name}" in lt.TEMPLATES["train"][int(t.template[-1])][0]
    )
    (_, call, _), (_, finish, _) = env_sft_examples(env, [task])
    assert json.loads(call) == {"tool": "calendar.list_events", "args": task.expected_args}
    on_day = [e for e in task.initial_state["events"] if e["day"] == task.expected_args["day"]]
    answer = json.loads(finish)["args"]["answer"]
    assert on_day and all(f"{e['attendee']} on {e['day']} at {e['time']}" in answer for e in on_day)
    empty = next(
        t
        for t in train
        if t.expected_args and not any(e["day"] == t.expected_args["day"] for e in t.initial_state["events"])
    )
    assert json.loads(env_sft_examples(env, [empty])[1][1])["args"]["answer"] == "Nothing is scheduled."


def test_compound_requests_are_two_independent_calls_one_a_turn_then_finish():
    from workbench.domains.calendar import compound_tasks as ct

    train, val = (load_task_source("builtin:calendar_compound", sp) for sp in ("train", "validation"))
    assert (len(train), len(val)) == (300, 30) and train == ct.builtin_compound_tasks("train")
    single = {t.prompt: t for t in st.builtin_tasks("train")}
    for t in train:
        first, second = t.expected_calls
        assert first["name"] != second["name"] and t.expected_state is None
        left, right = t.prompt.split(" Also: ")
        assert [single[left].expected_tool, single[right].expected_tool] == [first["name"], second["name"]]
    assert not {t.prompt.split(" Also: ")[0] for t in val} & set(single)  # validation's come from held_out
    env = MultiTurnEnv()
    task = next(t for t in train if t.expected_calls[0]["name"] == "calendar.cancel_event")
    examples = env_sft_examples(env, [task])
    assert [json.loads(a)["tool"] for _, a, _ in examples] == [c["name"] for c in task.expected_calls] + [
        "finish"
    ]
    for (before, answer, _), (after, _, _) in zip(examples[:-1], examples[1:], strict=True):
        # each turn sees the earlier one and its (ok) result: the cancelled meeting was on the calendar
        assert after[: len(before)] == before and after[len(before)]["content"] == answer
        assert json.loads(after[len(before) + 1]["content"])["ok"] is True


def test_the_agent_recipe_names_both_stages():
    cfg = load_config(RECIPE)
    assert cfg.env == "multi_turn" and cfg.reward == "agent_state" and cfg.grpo_skills == ["multi_step"]
    train = load_task_source(cfg.tasks, "train")
    sft, rl = splits.stage_tasks(train, cfg.grpo_holdout, cfg.grpo_skills, cfg.sft_skill_weights)
    assert {t.dataset for t in sft} == {"calendar"} and {t.dataset for t in rl} == {at.DATASET}
    validation, test, _ = splits.resolve(
        cfg.held_out_eval, cfg.test_tasks, load_task_source(cfg.held_out_eval, "held_out")
    )
    assert len(validation) == len(test) == 140 and {t.split for t in test} == {"test"}
    longest = max(s["calls"] for sp in at.SPLITS for _, s in at.generate(sp))  # the intended path's calls
    assert cfg.max_turns >= longest + 1  # room for them and a look the generator did not need
