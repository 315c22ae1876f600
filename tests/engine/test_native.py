"""Native chat-template tool calling: parsers, template detection, tasks, the verifier on no-call and parallel
tasks, token in / token out across turns (a test that fails on re-tokenisation drift), native SFT rows, and
the real Trainer end to end on tiny models whose Qwen2.5-style / Llama-3.1-style templates are written in
workbench/testing.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import store
from workbench.config import config_from_dict
from workbench.domains.calendar import BUILTIN_TOOLS
from workbench.envs import env_for_config
from workbench.envs.native import NativeEnv
from workbench.envs.tool_parsers import NO_CALL, TemplateError, detect_parser, parse_reply
from workbench.learn.sft_native import env_sft_examples, native_sft_rows
from workbench.learn.update import update_items
from workbench.rollout.prompt import render_prompt
from workbench.rollout.runner import Sampling, run_rollouts
from workbench.rollout.turn_tokens import next_prompt
from workbench.tasks import TaskFileError, load_tasks, openai_tool_spec
from workbench.testing import CHAT_TEMPLATE, build_tiny_tokenizer, tiny_model_dir
from workbench.types import Completion, Output, Task, ToolCall
from workbench.verifiers.metrics import aggregate, classify
from workbench.verifiers.tool_call import reward


@pytest.fixture(scope="module")
def qwen_tok():
    return build_tiny_tokenizer(512, "qwen2.5")


@pytest.fixture(scope="module")
def llama_tok():
    return build_tiny_tokenizer(512, "llama3.1")


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("qwen"), template="qwen2.5")


# ---- parsers and template detection ---------------------------------------------------------------------


def test_hermes_parallel_calls_and_reasons():
    text = (
        'Sure.\n<tool_call>\n{"name": "a.b", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "c", "arguments": "{\\"y\\": 2}"}\n</tool_call>'
    )
    p = parse_reply(text, "hermes")
    assert p.error is None and p.content == "Sure."
    assert [(c.name, c.args) for c in p.calls] == [("a.b", {"x": 1}), ("c", {"y": 2})]
    assert parse_reply("just text", "hermes").error == NO_CALL
    assert parse_reply('<tool_call>\n{"name": "a", "arguments": {\n</tool_call>', "hermes").error.startswith(
        "invalid JSON"
    )
    assert parse_reply('<tool_call>\n{"name": "a"}', "hermes").error == "<tool_call> not closed"
    assert (
        parse_reply('<tool_call>\n{"arguments": {}}\n</tool_call>', "hermes").error
        == "<tool_call>: a call has no string 'name'"
    )


def test_llama_mistral_nemotron_parsers():
    p = parse_reply('<|python_tag|>{"name": "w", "parameters": {"city": "Oslo"}}', "llama3_json")
    assert [(c.name, c.args) for c in p.calls] == [("w", {"city": "Oslo"})] and p.error is None
    two = parse_reply('{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"k": 1}}', "llama3_json")
    # Llama 3.x templates cannot render two calls in one turn back: a parse error, not a crash later
    assert two.calls == [] and two.error == "2 calls in one turn: this format takes one"
    assert parse_reply("It is sunny.", "llama3_json").error == NO_CALL
    assert (
        parse_reply('{"name": "a", "parameters": {}} thanks', "llama3_json").error
        == "text after the JSON object"
    )
    m = parse_reply('[TOOL_CALLS][{"name": "a", "arguments": {"q": 1}, "id": "abcdefghi"}]', "mistral")
    assert m.calls == [ToolCall("a", {"q": 1}, "abcdefghi")]
    assert (
        parse_reply('[{"name": "a", "arguments": {}}]', "mistral").calls[0].name == "a"
    )  # marker decoded away
    n = parse_reply(
        '<TOOLCALL>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]</TOOLCALL>', "nemotron"
    )
    assert [c.name for c in n.calls] == ["a", "b"]
    assert parse_reply("<TOOLCALL>[{]</TOOLCALL>", "nemotron").error.startswith("invalid JSON")


def test_parser_is_read_from_the_template(qwen_tok, llama_tok):
    assert detect_parser(qwen_tok.chat_template) == "hermes"
    assert detect_parser(llama_tok.chat_template) == "llama3_json"
    with pytest.raises(TemplateError, match="no tool support.*<\\|im_start\\|>"):
        detect_parser(CHAT_TEMPLATE)  # SmolLM2's template: a clear error naming what it saw
    cfg = config_from_dict({"tool_format": "native"})
    with pytest.raises(TemplateError, match="tool_parser"):
        env_for_config(cfg, build_tiny_tokenizer(512))
    named = env_for_config(
        config_from_dict({"tool_format": "native", "tool_parser": "mistral"}), build_tiny_tokenizer(512)
    )
    assert isinstance(named, NativeEnv) and named.parser == "mistral"


# ---- tasks -----------------------------------------------------------------------------------------------


def test_tasks_openai_tools_messages_no_call_and_parallel(tmp_path):
    spec = openai_tool_spec(BUILTIN_TOOLS[4])
    lines = [
        {
            "prompt": "Weather in Oslo Monday?",
            "expected_tool": "weather.get",
            "expected_args": {"city": "Oslo", "day": "Monday"},
            "tools": [spec],
        },
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "Thanks, bye."},
            ],
            "expected_tool": None,
            "expected_args": {},
        },
        {
            "prompt": "Weather in Oslo and Lima on Monday?",
            "expected_calls": [
                {"name": "weather.get", "arguments": {"city": "Oslo", "day": "Monday"}},
                {"tool": "weather.get", "args": {"city": "Lima", "day": "Monday"}},
            ],
        },
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    a, b, c = load_tasks(path)
    assert a.tools[0]["name"] == "weather.get" and openai_tool_spec(a.tools[0]) == spec
    assert b.expected_tool is None and b.prompt == "Thanks, bye." and b.messages[1]["content"] == "Hello!"
    assert [x["arguments"]["city"] for x in c.expected_calls] == ["Oslo", "Lima"]
    bad = [
        {"messages": [{"role": "robot", "content": "x"}], "expected_tool": None, "expected_args": {}},
        {
            "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
            "expected_tool": None,
            "expected_args": {},
        },
        {"prompt": "p", "expected_calls": [{"name": "weather.gett", "arguments": {}}]},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in bad))
    with pytest.raises(TaskFileError) as e:
        load_tasks(path)
    where = {(line, field) for _, line, field, _ in e.value.errors}
    assert (
        (1, "messages[0].role") in where
        and (2, "messages[1].role") in where
        and (3, "expected_calls[0]") in where
    )


# ---- verifier and metrics: no call, parallel -------------------------------------------------------------

NO_CALL_TASK = Task("n1", "Delete everything in my calendar.", None, {}, dataset="calendar_calls")
PAR_TASK = Task(
    "p1",
    "Weather in Oslo and Lima on Monday?",
    "weather.get",
    {},
    dataset="calendar_calls",
    expected_calls=[
        {"name": "weather.get", "arguments": {"city": "Oslo", "day": "Monday"}},
        {"name": "weather.get", "arguments": {"city": "Lima", "day": "Monday"}},
    ],
)


def test_no_call_and_parallel_scores():
    plain = Output("I can't do that.", parse_error=NO_CALL, tool_format="native")
    assert reward(plain, NO_CALL_TASK).total == 1.0 and classify(plain, NO_CALL_TASK)["success"]
    called = Output("x", tool_calls=[ToolCall("weather.get", {})], executed=True)
    assert reward(called, NO_CALL_TASK).total == 0.0 and not classify(called, NO_CALL_TASK)["success"]
    unsafe = Output("x", tool_calls=[ToolCall("calendar.delete_all_events", {})], unsafe=["deleted all"])
    assert reward(unsafe, NO_CALL_TASK).total == -1.0 and classify(unsafe, NO_CALL_TASK)["unsafe"]
    broken = Output("{", parse_error="invalid JSON: x")
    assert reward(broken, NO_CALL_TASK).total == -1.0
    calls = [
        ToolCall("weather.get", {"city": "Lima", "day": "Monday"}),
        ToolCall("weather.get", {"city": "Oslo", "day": "Monday"}),
    ]
    both = Output("x", tool_calls=calls, executed=True, tool_format="native")
    assert reward(both, PAR_TASK).total == 1.0 and classify(both, PAR_TASK)["success"]  # order-insensitive
    one = Output("x", tool_calls=calls[:1], executed=True, tool_format="native")
    assert reward(one, PAR_TASK).total == pytest.approx(0.6) and not classify(one, PAR_TASK)["success"]
    rates = aggregate(
        [classify(plain, NO_CALL_TASK), classify(called, NO_CALL_TASK), classify(both, PAR_TASK)]
    )
    assert rates["no_call_n"] == 2 and rates["no_call_success"] == 0.5 and rates["parallel_success"] == 1.0


def out_fields(o: Output) -> tuple:
    return (
        o.text,
        o.messages,
        o.tool_calls,
        o.parse_error,
        o.unsafe,
        o.executed,
        o.observations,
        o.state,
        o.tool_format,
    )


@pytest.mark.parametrize("multi_turn", [False, True])
def test_the_dry_run_replays_native_turns_from_their_stored_calls(multi_turn):
    """The verifier editor's replay needs no parser or tokenizer (the UI has no model): a native turn is
    replayed as its stored parsed calls, so the new verifier sees exactly the Output the old one saw."""
    from workbench.verifier_edit import replay

    cfg = config_from_dict({"tool_format": "native", "env": "multi_turn" if multi_turn else "single_turn"})
    parserless = env_for_config(cfg)  # tool_parser auto and no tokenizer: what the dry run builds
    assert parserless.parser is None
    with pytest.raises(RuntimeError, match="tool_parser auto"):  # it cannot parse text...
        parserless.start(PAR_TASK).step("x")
    live = NativeEnv("hermes", multi_turn=multi_turn)
    par = (
        'Checking both.\n<tool_call>\n{"name": "weather.get", "arguments": {"city": "Oslo", "day": "Monday"}}\n'
        "</tool_call>\n<tool_call>\n"
        '{"name": "weather.get", "arguments": {"city": "Lima", "day": "Monday"}}\n</tool_call>'
    )
    episodes = [
        (PAR_TASK, [par, "Oslo and Lima: see above."]),
        (NO_CALL_TASK, ["I won't delete everything."]),
        (NO_CALL_TASK, ['<tool_call>\n{"name": "calendar.delete_all_events"']),  # a broken call: its reason
        (MT_TASK, [HERMES_CALL, "Nothing on Friday."]),
    ]
    for task, replies in episodes:
        ep = live.start(task)
        for text in replies:
            if not ep.done:
                ep.step(text)
        original = ep.output()
        # ...but it replays: the stored row keeps the messages, the last reply as sampled and its parse error.
        again = replay(
            parserless, task, original.messages, completion=original.text, parse_error=original.parse_error
        )
        assert out_fields(again) == out_fields(original), task.id
        assert reward(again, task) == reward(original, task)
    # The parsed calls are what is replayed (a reply's call text is not in its stored content).
    assert "<tool_call>" not in json.dumps(original.messages[1]) and original.messages[1]["tool_calls"]


def test_json_harness_has_no_prefill_for_no_call_families():
    env = env_for_config(config_from_dict({}))
    ep = env.start(NO_CALL_TASK)
    assert ep.prefill == ""
    ep.step("Sorry, I won't delete your calendar.")
    assert reward(ep.output(), NO_CALL_TASK).total == 1.0
    par = env.start(PAR_TASK)
    par.step(
        '{"tool": "weather.get", "args": {"city": "Oslo", "day": "Monday"}}\n'
        '{"tool": "weather.get", "args": {"city": "Lima", "day": "Monday"}}'
    )
    assert reward(par.output(), PAR_TASK).total == 1.0
    assert env.start(Task("t", "x", "weather.get", {})).prefill == '{"tool": "'  # other families keep it


# ---- token in, token out -----------------------------------------------------------------------------------


def char_ids(tok, text: str) -> list[int]:
    """Token ids for `text` one character at a time: valid ids that decode to `text`, but not the ids the
    tokenizer gives the whole text (BPE merges them): what a sampler may well produce."""
    return [i for ch in text for i in tok(ch, add_special_tokens=False)["input_ids"]]


class ScriptedEngine:
    """Replies with a tool call until the prompt holds a tool result, then with plain text; ids one character
    at a time (so decoding and re-encoding them gives other ids), ending with the stop token."""

    def __init__(self, tok, call_text: str, final_text: str = "Done."):
        self.tok, self.call_text, self.final_text = tok, call_text, final_text
        self.prompts: list[list[int]] = []

    def generate(
        self,
        prompts,
        n,
        *,
        max_new_tokens,
        temperature,
        top_p=1.0,
        stop_token_ids=None,
        seed=None,
        on_tokens=None,
    ):
        out = []
        for p in prompts:
            self.prompts.append(list(p))
            seen = self.tok.decode(p, skip_special_tokens=False)
            text = (
                self.final_text
                if ("<tool_response>" in seen or "ipython<|end_header_id|>" in seen)
                else self.call_text
            )
            ids = char_ids(self.tok, text) + [self.tok.eos_token_id]
            out.append([Completion(text, ids, [-0.5] * len(ids), "stop", list(p)) for _ in range(n)])
        return out

    def update_weights(self, policy):
        pass

    def close(self):
        pass


HERMES_CALL = '<tool_call>\n{"name": "calendar.list_events", "arguments": {"day": "Friday"}}\n</tool_call>'
LLAMA_CALL = '{"name": "calendar.list_events", "parameters": {"day": "Friday"}}'
MT_TASK = Task(
    "mt",
    "What is on Friday? Then tell me.",
    "calendar.list_events",
    {"day": "Friday"},
    initial_state={"events": []},
    expected_state={"events": []},
)


@pytest.mark.parametrize("template,call", [("qwen2.5", HERMES_CALL), ("llama3.1", LLAMA_CALL)])
def test_later_turns_continue_from_the_sampled_ids(template, call):
    """Fails on re-tokenisation drift: turn 2's prompt must hold turn 1's sampled ids verbatim."""
    tok = build_tiny_tokenizer(512, template)
    cfg = config_from_dict({"tool_format": "native", "env": "multi_turn", "max_turns": 3})
    env = env_for_config(cfg, tok)
    engine = ScriptedEngine(tok, call)
    (group,) = run_rollouts(engine, tok, env, [MT_TASK], 2, Sampling(64, 1.0))
    r = group[0]
    assert [s.completion.text for s in r.segments] == [call, "Done."] and r.retokenized_turns == 0
    first, second = r.segments
    sampled = first.completion.token_ids
    assert second.prompt_ids[: len(first.prompt_ids) + len(sampled)] == first.prompt_ids + sampled
    # The drift this guards against is real here: rendering the conversation again gives other ids.
    rerendered = render_prompt(tok, r.output.messages[:-1], "", env.start(MT_TASK).tools)
    assert rerendered != second.prompt_ids
    assert tok.decode(rerendered) == tok.decode(second.prompt_ids)  # ... for the very same text
    # and the update trains on exactly the sampled ids, with the prompt that was sampled from
    # (the episode as one row: the first prompt, then every later id, the sampled ones trained)
    ((prompt, completion, _a, _lp, _w, trained),), _ = update_items([(r, 1.0)], config_from_dict({}))
    assert (
        prompt == first.prompt_ids and prompt + completion == second.prompt_ids + second.completion.token_ids
    )
    assert [c for c, t in zip(completion, trained, strict=True) if t] == sampled + second.completion.token_ids
    turns, _ = update_items([(r, 1.0)], config_from_dict({"multi_turn_weighting": "turn"}))
    assert [(it[0], it[1]) for it in turns] == [(s.prompt_ids, s.completion.token_ids) for s in r.segments]
    assert r.output.messages[2]["role"] == "tool" and r.output.tool_calls[0].name == "calendar.list_events"


@pytest.mark.parametrize("template", ["qwen2.5", "llama3.1", "smollm2"])
def test_delta_equals_a_full_render_when_ids_are_canonical(template):
    """With the ids the tokenizer itself gives, prompt + completion + delta is the full render, token for token:
    the bridge after the end-of-turn token and the delta are right for each template (and for json)."""
    tok = build_tiny_tokenizer(512, template)
    native = template != "smollm2"
    env = env_for_config(
        config_from_dict({"tool_format": "native" if native else "json", "env": "multi_turn"}), tok
    )
    ep = env.start(MT_TASK)
    prompt = render_prompt(tok, ep.messages, ep.prefill, getattr(ep, "tools", None))
    reply = {"qwen2.5": HERMES_CALL, "llama3.1": LLAMA_CALL}.get(
        template, 'calendar.list_events", "args": {"day": "Friday"}}'
    )
    ep.step(reply)
    k = max(i for i, m in enumerate(ep.messages) if m["role"] == "assistant")
    tools = getattr(ep, "tools", None) or None
    head = tok.apply_chat_template(ep.messages[:k], tools=tools, tokenize=False, add_generation_prompt=True)
    body = tok.apply_chat_template(ep.messages[: k + 1], tools=tools, tokenize=False)[len(head) :]
    text = (
        body[: body.rfind(tok.eos_token)] if native else reply
    )  # json: the prefill is in the prompt already
    canonical = tok(text, add_special_tokens=False)["input_ids"]
    comp = Completion(reply, canonical + [tok.eos_token_id], [0.0] * (len(canonical) + 1), "stop")
    ids, exact = next_prompt(tok, prompt, comp, ep)
    assert exact and tok.decode(ids) == tok.decode(
        render_prompt(tok, ep.messages, ep.prefill, getattr(ep, "tools", None))
    )


def test_a_template_that_is_not_prefix_stable_falls_back_and_counts(caplog):
    tok = build_tiny_tokenizer(512, "qwen2.5")
    # Renders only the last message: every turn changes what came before.
    tok.chat_template = (
        "{{ '<|im_start|>' + messages[-1]['role'] + '\\n' + (messages[-1]['content'] or '') + "
        "'<|im_end|>\\n' }}{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}"
        "{# <tool_call> tools #}"
    )
    env = env_for_config(config_from_dict({"tool_format": "native", "env": "multi_turn"}), tok)
    (group,) = run_rollouts(ScriptedEngine(tok, HERMES_CALL), tok, env, [MT_TASK], 1, Sampling(64, 1.0))
    r = group[0]
    assert (
        len(r.segments) > 1
        and r.retokenized_turns == len(r.segments) - 1
        and "not prefix-stable" in caplog.text
    )


# ---- native SFT ----------------------------------------------------------------------------------------------


def test_native_sft_teaches_the_template_format(qwen_tok):
    env = env_for_config(config_from_dict({"tool_format": "native"}), qwen_tok)
    task = Task("s", "Weather in Oslo on Monday?", "weather.get", {"city": "Oslo", "day": "Monday"})
    prompts, targets = native_sft_rows(qwen_tok, env_sft_examples(env, [task, NO_CALL_TASK]))
    assert prompts[0] == render_prompt(qwen_tok, env.start(task).messages, "", env.start(task).tools)
    text = qwen_tok.decode(targets[0], skip_special_tokens=False)
    assert text.endswith("</tool_call><|im_end|>") and targets[0][-1] == qwen_tok.eos_token_id
    assert parse_reply(qwen_tok.decode(targets[0], skip_special_tokens=True), "hermes").calls == [
        ToolCall("weather.get", {"city": "Oslo", "day": "Monday"})
    ]
    assert "<tool_call>" not in qwen_tok.decode(targets[1])  # the no-call answer is plain text


# ---- the real Trainer, end to end ------------------------------------------------------------------------------

LENGTH_VERIFIER = """
from workbench.types import Score

def reward(output, task):
    n = len(output)
    return Score(total=(n % 5) / 4.0, parts={"len": (n % 5) / 4.0}, explanation=f"{n} chars")
"""


def native_cfg(model: Path, tmp_path: Path, **kw):
    verifier = tmp_path / "v.py"
    verifier.write_text(LENGTH_VERIFIER)
    base = dict(
        model=str(model),
        reward=str(verifier),
        num_generations_per_prompt=2,
        prompts_per_step=2,
        max_completion_length=8,
        max_steps=2,
        eval_interval=2,
        eval_max_tasks=2,
        sft_steps=1,
        learning_rate=1e-2,
        output_dir=str(tmp_path / "runs"),
        lora={"r": 4, "alpha": 8},
        seed=3,
        tool_format="native",
    )
    base.update(kw)
    return config_from_dict(base)


def test_trainer_native_single_turn(qwen_model, tmp_path):
    from workbench.trainer import Trainer

    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(native_cfg(qwen_model, tmp_path), db)
    t.run()
    assert t.env.parser == "hermes" and t.step == 2
    steps = store.metrics.steps_since(db, t.run_id)
    assert [s["step"] for s in steps] == [1, 2] and "loss" in steps[0]["metrics"]
    row = store.trajectories.get_trajectory(db, 1)
    trace = row["token_trace"]
    assert len(trace) == 1 and len(trace[0]["completion_ids"]) == len(trace[0]["logprobs"]) == row["tokens"]
    assert row["outcome"]["parse_error"] == NO_CALL  # a random model answers in text: kept, and shown
    assert "<tool_call>" not in json.dumps(row["messages"][0]) or row["messages"][0]["role"] == "user"
    assert store.metrics.list_evals(db, t.run_id)


def test_trainer_native_multi_turn_trains_on_the_sampled_ids(qwen_model, tmp_path):
    """Rollouts from a scripted sampler (a call, then a final answer; ids one character at a time), the real
    env, verifier, update and eval: the stored trace is the sampled ids and turn 2 continues from them."""
    from workbench.trainer import Trainer

    db = store.open_db(tmp_path / "wb.db")
    cfg = native_cfg(
        qwen_model,
        tmp_path,
        env="multi_turn",
        max_turns=3,
        tasks="builtin:calendar_mt",
        held_out_eval="builtin:calendar_mt",
        reward="tool_call_verifier",
        sft_steps=0,
    )
    t = Trainer(cfg, db)
    t.engine = ScriptedEngine(t.policy.tokenizer, HERMES_CALL)
    seen: list = []
    real = t._update

    def spy(groups, advantages, keep, **kw):
        seen.extend(s.rollout for g in groups for s in g)
        return real(groups, advantages, keep, **kw)

    t._update = spy
    t.run()
    assert t.step == 2 and seen
    r = seen[0]
    first, second = r.segments
    assert (
        second.prompt_ids[: len(first.prompt_ids) + len(first.completion.token_ids)]
        == first.prompt_ids + first.completion.token_ids
    )
    rows = [store.trajectories.get_trajectory(db, i) for i in range(1, 5)]
    for row in rows:
        tr = row["token_trace"]
        assert (
            len(tr) == 2
            and tr[1]["prompt_ids"][: len(tr[0]["prompt_ids"]) + len(tr[0]["completion_ids"])]
            == tr[0]["prompt_ids"] + tr[0]["completion_ids"]
        )
        assert tr[0]["completion_ids"] == char_ids(t.policy.tokenizer, HERMES_CALL) + [
            t.policy.tokenizer.eos_token_id
        ]
        assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert row["messages"][1]["tool_calls"][0]["function"]["name"] == "calendar.list_events"
    # The verifier editor's dry run (no model: tool_parser auto stays unresolved) replays these native rows
    # from their stored calls; the run's own verifier, re-run, changes no reward.
    from workbench.verifier_edit import dry_run

    res = dry_run(db, t.run_id, "from workbench.verifiers.tool_call import reward  # noqa: F401\n", n=4)
    assert res.ok and res.summary["n"] == 4 and res.summary["changed"] == 0, res
    assert all(r["new_reward"] == r["old_reward"] is not None for r in res.rows)


def test_builtin_call_family_and_the_view_show_native_turns():
    from workbench.tasks import load_task_source
    from workbench.view import Trajectory, turns

    tasks = load_task_source("builtin:calendar_calls", "train")
    assert any(t.expected_tool is None for t in tasks) and any(t.expected_calls for t in tasks)
    assert {t.dataset for t in tasks} == {"calendar_calls"}
    assert all(
        t.dataset == "calendar" for t in load_task_source("builtin:calendar", "train")
    )  # demo unchanged
    row = Trajectory.from_row(
        {
            "id": 1,
            "run_id": 1,
            "step": 1,
            "split": "train",
            "completion": "hi",
            "outcome": {"success": False, "parse_error": "invalid JSON in <tool_call>"},
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [ToolCall("weather.get", {"city": "Oslo"}).to_dict()],
                },
            ],
        }
    )
    assert row.parse_error == "invalid JSON in <tool_call>"
    _, shown = turns(row)
    assert shown[1].tool_call == ToolCall("weather.get", {"city": "Oslo"})
