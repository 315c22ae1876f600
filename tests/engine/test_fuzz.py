"""Fuzzing the input boundaries (hypothesis, derandomized): the tasks JSONL loader, the config loader, the
tool-call parsers and `ToolCall.from_dict`.

The properties: a loader raises nothing but its own error type (`TaskFileError`, `ConfigError`), and the
message names the file, the line (where there is one) and the field; a parser never raises at all and its
reason, when it concerns a position, gives the offset in the reply. Every crash these found is pinned as an
`@example` or a plain regression test below.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from workbench.config import (
    Config,
    ConfigError,
    HarnessConfig,
    LoraConfig,
    _type_ok,
    config_from_dict,
    load_config,
)
from workbench.envs import Harness
from workbench.envs.parse import balanced_objects, parse_tool_call, strip_fences, to_tool_call
from workbench.tasks import TASK_FIELDS, TaskFileError, load_task_source, load_tasks
from workbench.types import Task, ToolCall
from workbench.verifiers.judge import parse_judge_score


def fuzz(n: int) -> settings:
    """Reproducible (CI sees the same examples every run), no per-example deadline, no example database."""
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# --- values --------------------------------------------------------------------------------------------------


def json_values(floats: st.SearchStrategy) -> st.SearchStrategy:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.integers(min_value=10**30)
        | floats
        | st.text(max_size=12)
    )
    return st.recursive(
        scalars,
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
        max_leaves=10,
    )


JSON = json_values(st.floats())  # NaN and the infinities too (json.dumps writes them as NaN, Infinity)
FINITE_JSON = json_values(st.floats(allow_nan=False, allow_infinity=False))
# JSON text Python's json.loads takes or chokes on in ways other than JSONDecodeError.
RAW = st.sampled_from(
    [
        "NaN",
        "Infinity",
        "-Infinity",
        "1e999",
        "-0",
        "1" * 5000,
        "-" + "9" * 4301,
        "[" * 3000 + "]" * 3000,
        '{"a":' * 3000 + "1" + "}" * 3000,
        '"\\ud800"',
        '"\\u0000"',
        '"' + "x" * 100_000 + '"',
        "[]",
        "{}",
        '""',
        "  ",
    ]
)
DEEP = "[" * 100_000  # past the recursion limit in every decoder


# --- tasks ---------------------------------------------------------------------------------------------------

GOOD = {
    "prompt": "Book Sam on Monday at 14:00",
    "expected_tool": "calendar.create_event",
    "expected_args": {"attendee": "Sam", "day": "Monday", "time": "14:00"},
}
CUSTOM = {
    "prompt": "Buy milk",
    "expected_tool": "shop.buy",
    "expected_args": {"item": "milk"},
    "id": "c1",
    "split": "held_out",
    "dataset": "shop",
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "shop.buy",
                "description": "Buy one item.",
                "parameters": {
                    "type": "object",
                    "properties": {"item": {"type": "string", "description": "what"}},
                    "required": ["item"],
                },
            },
        }
    ],
}
MULTI = {**GOOD, "initial_state": {"events": []}, "expected_state": {"events": [{"attendee": "Sam"}]}}
LINE_PROBLEMS = ("not UTF-8", "bad JSON", "line is a JSON")  # the reasons of a line with no field ("-")


def check_task_error(err: TaskFileError, path: Path, nlines: int) -> None:
    """Every problem names this file, a line of it (0: the whole file) and a field; the message lists them."""
    text = str(err)
    assert err.errors and text.startswith(f"{len(err.errors)} problem(s) in task file:\n")
    for p, n, field, reason in err.errors:
        assert p == str(path) and isinstance(n, int) and 0 <= n <= nlines and field and reason
        if field == "-":
            assert n == 0 or reason.startswith(LINE_PROBLEMS), reason
        else:
            assert field.split("[")[0].split(".")[0] in TASK_FIELDS or reason.startswith("unknown field"), (
                field
            )
    for p, n, field, reason in err.errors[:20]:
        assert (f"{p}:{n}: {field}: {reason}" if n else f"{p}: {field}: {reason}") in text


def check_tasks(tasks: list[Task]) -> None:
    """What the loader accepts has the types the engine reads, and the harness can show it to a model."""
    for t in tasks:
        assert isinstance(t.id, str) and t.id and isinstance(t.prompt, str) and t.prompt.strip()
        # expected_tool null is a no-call task (the right answer is no call): the loader keeps it as None
        assert (t.expected_tool is None or isinstance(t.expected_tool, str)) and isinstance(
            t.expected_args, dict
        )
        assert isinstance(t.split, str) and isinstance(t.dataset, str)
        assert t.tools is None or all(isinstance(s, dict) and isinstance(s["name"], str) for s in t.tools)
        Harness().messages(t)


def load_both(path: Path, nlines: int) -> list[Task] | None:
    """load_tasks and load_task_source on one file: tasks, or None after checking the TaskFileError."""
    try:
        tasks = load_tasks(path)
    except TaskFileError as err:
        check_task_error(err, path, nlines)
        with pytest.raises(TaskFileError):
            load_task_source(path, "train")
        return None
    check_tasks(tasks)
    try:
        assert load_task_source(path, "held_out")
    except TaskFileError as err:
        check_task_error(err, path, nlines)
        assert not tasks or len({t.split for t in tasks}) > 1
    return tasks


@fuzz(150)
@given(data=st.binary(max_size=300))
@example(data=b"")
@example(data=b"\n \n\r\n")  # blank lines only: was a bare ValueError from load_task_source
@example(data=b"\xef\xbb\xbf" + json.dumps(GOOD).encode())  # BOM
@example(data=b"\xff\xfe{}")
@example(data=b'{"prompt": ' + b"1" * 5000 + b"}")  # an integer past the digit limit: was a bare ValueError
@example(data=DEEP.encode())  # was RecursionError
def test_tasks_arbitrary_bytes(fuzz_dir, data):
    path = fuzz_dir / "bytes.jsonl"
    path.write_bytes(data)
    load_both(path, data.count(b"\n") + 1)


@fuzz(100)
@given(
    lines=st.lists(
        st.text(alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=60),
        max_size=6,
    ),
    crlf=st.booleans(),
)
def test_tasks_arbitrary_text_lines(fuzz_dir, lines, crlf):
    path = fuzz_dir / "text.jsonl"
    path.write_bytes(("\r\n" if crlf else "\n").join(lines).encode("utf-8"))
    load_both(path, max(len(lines), 1))


@fuzz(150)
@given(values=st.lists(JSON | RAW.map(lambda r: ("raw", r)), min_size=1, max_size=4))
@example(
    values=[{"": None, "a\nb: c": 1}]
)  # unknown keys printed bare: "path:1: : unknown field", a broken line
def test_tasks_arbitrary_json_value_per_line(fuzz_dir, values):
    path = fuzz_dir / "values.jsonl"
    path.write_text(
        "\n".join(v[1] if isinstance(v, tuple) else json.dumps(v) for v in values), encoding="utf-8"
    )
    assert load_both(path, len(values)) in (None, [])  # no value of these is a task


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key/index path into a JSON value."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    out = []
    for k, v in items:
        out.append((*prefix, k))
        out.extend(_paths(v, (*prefix, k)))
    return out


SENTINEL = "__raw_literal__"


@st.composite
def near_valid_task(draw: st.DrawFn) -> tuple[str, tuple, str]:
    """One good task with one thing changed: (line, path changed, how)."""
    obj = copy.deepcopy(draw(st.sampled_from([GOOD, CUSTOM, MULTI])))
    path = draw(st.sampled_from(_paths(obj) + [("expected_arg",), ("tool",)]))
    how = draw(st.sampled_from(["delete", "value", "raw", "rename"]))
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    last = path[-1]
    if how == "delete" and isinstance(parent, dict):
        parent.pop(last, None)
    elif how == "rename" and isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=12))] = parent.pop(last, None)
    elif how == "raw":
        parent[last] = SENTINEL
    else:
        how = "value"
        parent[last] = draw(JSON)
    line = json.dumps(obj)
    if how == "raw":
        line = line.replace(json.dumps(SENTINEL), draw(RAW))
    return line, path, how


@fuzz(300)
@given(case=near_valid_task())
@example(
    case=(
        json.dumps({**CUSTOM, "tools": [{"name": "shop.buy", "parameters": {"required": 5}}]}),
        ("tools", 0, "parameters", "required"),
        "value",
    )
)  # was TypeError: 'int' object is not iterable
@example(
    case=(
        json.dumps({**CUSTOM, "tools": [{"name": "shop.buy", "parameters": {"required": [["item"]]}}]}),
        ("tools", 0, "parameters", "required"),
        "value",
    )
)  # was TypeError: unhashable type: 'list'
@example(
    case=(
        json.dumps({**CUSTOM, "tools": [{"name": "shop.buy", "description": None}]}),
        ("tools", 0, "description"),
        "value",
    )
)  # loaded, then crashed the harness (None.strip())
@example(
    case=(
        json.dumps({**CUSTOM, "tools": [{"name": "shop.buy", "parameters": {"properties": [1]}}]}),
        ("tools", 0, "parameters", "properties"),
        "value",
    )
)  # loaded, then crashed the harness
@example(case=(json.dumps(GOOD).replace('"Sam"', "1" * 5000, 1), ("prompt",), "raw"))
@example(case=(json.dumps({**GOOD, "-": GOOD["prompt"]}), ("prompt",), "rename"))  # read as "-", no field
def test_tasks_near_valid_line_names_the_field(fuzz_dir, case):
    line, changed, how = case
    path = fuzz_dir / "near.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    try:
        tasks = load_tasks(path)
    except TaskFileError as err:
        check_task_error(err, path, 2)
        assert {n for _, n, _, _ in err.errors} == {1}
        # the fields named, unknown ones (a renamed key, say) aside
        named = {
            f.split("[")[0].split(".")[0] for _, _, f, r in err.errors if not r.startswith("unknown field")
        }
        top = changed[0]
        related = {"expected_tool": {"expected_args"}, "tools": {"expected_tool", "expected_args"}}.get(
            top, set()
        )
        if how == "raw" and "-" in named:
            assert len(err.errors) == 1  # not JSON that Python reads: nothing more can be said of the line
        else:
            assert named <= {top} | related, (err.errors, changed, how)
        return
    assert len(tasks) == 1
    check_tasks(tasks)


LINE_KINDS = {  # kind -> (bytes, is it a problem line)
    "good": (json.dumps(GOOD).encode(), False),
    "long": (json.dumps({**GOOD, "prompt": "x" * 200_000}).encode(), False),
    "custom": (json.dumps({**CUSTOM, "id": None}).encode(), True),
    "blank": (b"", False),
    "spaces": (b" \t ", False),
    "not_json": (b"{not json", True),
    "not_object": (b"[1, 2]", True),
    "not_utf8": (b"\xff" + json.dumps(GOOD).encode(), True),
    "bad_field": (json.dumps({**GOOD, "prompt": 5}).encode(), True),
    "unknown_field": (json.dumps({**GOOD, "promt": "x"}).encode(), True),
    "huge_int": (b'{"prompt": ' + b"9" * 5000 + b"}", True),
    "deep": (b"[" * 5000, True),
}


@fuzz(120)
@given(
    kinds=st.lists(st.sampled_from(sorted(LINE_KINDS)), min_size=1, max_size=8),
    crlf=st.lists(st.booleans(), min_size=8, max_size=8),
    bom=st.booleans(),
)
def test_tasks_line_numbers_are_exact(fuzz_dir, kinds, crlf, bom):
    """Blank lines, CRLF, a BOM, very long lines: the lines reported are exactly the bad ones."""
    data = b"".join(LINE_KINDS[k][0] + (b"\r\n" if c else b"\n") for k, c in zip(kinds, crlf, strict=False))
    path = fuzz_dir / "lines.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    bad = {i for i, k in enumerate(kinds, start=1) if LINE_KINDS[k][1]} | ({1} if bom else set())
    try:
        tasks = load_tasks(path)
    except TaskFileError as err:
        check_task_error(err, path, len(kinds) + 1)
        assert {n for _, n, _, _ in err.errors} == bad
        return
    assert not bad and len(tasks) == sum(k in ("good", "long") for k in kinds)


def test_task_source_with_no_tasks_is_a_task_file_error(fuzz_dir):
    path = fuzz_dir / "empty.jsonl"
    path.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(TaskFileError, match=rf"{re.escape(str(path))}: -: no tasks"):
        load_task_source(path, "train")


# --- config --------------------------------------------------------------------------------------------------

HINTS = {cls: typing.get_type_hints(cls) for cls in (Config, LoraConfig, HarnessConfig)}
NESTED = {"lora": LoraConfig, "harness": HarnessConfig}
KEYS = sorted(f.name for f in dataclasses.fields(Config))
ALL_KEYS = KEYS + [f"{k}.{f.name}" for k, cls in NESTED.items() for f in dataclasses.fields(cls)]
MESSAGE = re.compile(r"^(?P<where>.+?)(?::(?P<line>\d+))?: (?P<rest>.*)$", re.DOTALL)
KEY_IN_MESSAGE = re.compile(
    r"^(?:unknown key '(?P<unknown>[^']*)'|(?P<typed>[\w.]+) (?:must be|is too large))"
)


def check_config(cfg: Config) -> None:
    """A config that loads has every field of its declared type."""
    for cls, obj in ((Config, cfg), (LoraConfig, cfg.lora), (HarnessConfig, cfg.harness)):
        for f in dataclasses.fields(cls):
            if f.name not in NESTED:
                assert _type_ok(getattr(obj, f.name), HINTS[cls][f.name]), (f.name, getattr(obj, f.name))


YAML_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")  # what PyYAML counts lines by


def check_config_error(err: ConfigError, where: str, text: str | None = None) -> re.Match:
    """The message starts with the file (and line, inside it) and names a key, or says why there is none."""
    msg = str(err)
    m = MESSAGE.match(msg)
    assert m and m["where"] == where, msg
    rest = m["rest"]
    if m["line"] is not None and text is not None:
        lines = YAML_LINE_BREAK.split(text)
        n = int(m["line"])
        assert 1 <= n <= len(lines), msg
        k = KEY_IN_MESSAGE.match(rest)
        if k and k["unknown"] is None:
            # a typed error points at its key's line
            assert k["typed"].split(".")[-1] in lines[n - 1], (msg, text)
    whole_file = (
        "not valid YAML",
        "the top level must be",
        "not UTF-8",
        "no such config file",
        "cannot read",
    )
    assert "\n" not in rest, msg  # one line
    assert (
        rest.startswith(whole_file)
        or "unknown key" in rest
        or any(re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", rest) for key in ALL_KEYS)
    ), msg
    return m


def load_yaml(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    try:
        check_config(load_config(path))
    except ConfigError as err:
        check_config_error(err, str(path), text)


PRINTABLE = st.characters(
    min_codepoint=0x20, max_codepoint=0x2FF, blacklist_categories=("Cc",)
)  # (st.text() has them)
YAML_KEYS = st.sampled_from(
    KEYS
    + [
        "lora",
        "harness",
        "num_generation_per_prompt",
        "lr",
        "<<",
        "? a",
        "- a",
        "&k a",
        "*k",
        "'q'",
        '"seed"',
        "1",
        "~",
        "true",
    ]
) | st.text(PRINTABLE, max_size=8)
YAML_VALUES = st.sampled_from(
    [
        "1",
        "-3",
        "8.5",
        "0",
        "1e400",
        "-.inf",
        ".nan",
        "true",
        "yes",
        "~",
        "null",
        "''",
        '"x"',
        "grpo",
        "ppo",
        "lora",
        "2001-02-30",
        "2001-12-14",
        "2001-12-14 21:59:43.10 -5",
        "0x1F",
        "0o17",
        "1_000",
        "!!int abc",
        "!!float x",
        "!!bool maybe",
        "!!timestamp never",
        "!!binary ???",
        "!!set {a, b}",
        "!!omap [a]",
        "!!python/object:os.system x",
        "&a [1, 2]",
        "*a",
        "*undefined",
        "&b {r: 4}",
        "*b",
        "[1, 2",
        "{r: 1}",
        "{r: {r: 1}}",
        "[a, b]",
        "'unterminated",
        "|\n  block",
        ">",
        "- x",
        "@x",
        "`x",
        "%x",
        "1" * 5000,
        "1" * 400,
        "[" * 40,
        "{a: " * 40,
        "\t1",
        "a: b: c",
    ]
) | st.text(PRINTABLE, max_size=12)


@st.composite
def yaml_text(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        indent = draw(st.sampled_from(["", "", "", "", "  ", "    ", "\t"]))
        sep = draw(st.sampled_from([": ", ": ", ":", " : ", ":\n  "]))
        lines.append(f"{indent}{draw(YAML_KEYS)}{sep}{draw(YAML_VALUES)}")
    head = draw(st.sampled_from(["", "---\n", "%YAML 1.1\n---\n", "- ", "[", "\ufeff"]))
    return head + draw(st.sampled_from(["\n", "\r\n"])).join(lines)


@fuzz(250)
@given(text=yaml_text() | st.text(max_size=120))
@example(text="seed: 2001-02-30\n")  # was ValueError (a date PyYAML reads but cannot build)
@example(text="seed: !!int abc\n")  # was ValueError
@example(text="seed: !!bool maybe\n")  # was KeyError
@example(text="seed: !!timestamp never\n")  # was AttributeError
@example(text="seed: " + "1" * 5000 + "\n")  # was ValueError (int digit limit)
@example(text="learning_rate: " + "1" * 400 + "\n")  # was OverflowError (int -> float)
@example(text="lora: &x {r: *x}\n")  # a mapping nesting itself: was RecursionError in _key_lines
@example(text="a: " + "[" * 1200 + "\n")  # was RecursionError (deep nesting costs ~0.4 s: examples only)
def test_config_arbitrary_yaml_text(fuzz_dir, text):
    load_yaml(fuzz_dir / "run.yaml", text)


def test_config_billion_laughs_message_is_short(fuzz_dir):
    """9 levels of 9 aliases: small in memory, 9**9 items when printed; the message was its full repr."""
    levels = ["&a [x, x, x, x, x, x, x, x, x]"] + [
        f"&{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    path = fuzz_dir / "laughs.yaml"
    path.write_text("seed: 1\nmodel: [" + ", ".join(levels) + "]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"laughs\.yaml:2: model must be str, got \[\[") as ei:
        load_config(path)
    assert len(str(ei.value)) < 300


def test_config_file_that_is_not_text(fuzz_dir):
    path = fuzz_dir / "binary.yaml"
    path.write_bytes(b"seed: \xff\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: not UTF-8"):
        load_config(path)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(fuzz_dir))}: cannot read"):
        load_config(fuzz_dir)


CONFIG_VALUES = JSON | st.sampled_from(["grpo", "lora", "float32", "vllm_server", 0, 1, 2, -1, 0.5, 10**400])


@st.composite
def config_data(draw: st.DrawFn) -> dict[str, Any]:
    """A mapping with real keys (and typos, nested mappings where scalars are expected) and arbitrary values."""
    data: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(ALL_KEYS) | st.text(min_size=1, max_size=10), max_size=5)):
        head, _, leaf = key.partition(".")
        if leaf and isinstance(data.get(head, {}), dict):
            data.setdefault(head, {})[leaf] = draw(CONFIG_VALUES)
        else:
            data[key] = draw(
                CONFIG_VALUES | st.dictionaries(st.sampled_from(["r", "alpha", "x"]), JSON, max_size=2)
            )
    return data


@fuzz(200)
@given(data=config_data())
@example(data={"learning_rate": 10**400})  # was OverflowError
def test_config_from_dict_and_yaml(fuzz_dir, data):
    try:
        check_config(config_from_dict(data, "stored"))
    except ConfigError as err:
        check_config_error(err, "stored")
    try:
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    except yaml.YAMLError:
        return
    load_yaml(fuzz_dir / "data.yaml", text)


@fuzz(40)
@given(data=JSON.filter(lambda v: v is not None and not isinstance(v, dict)))  # None: no keys, the defaults
def test_config_from_dict_non_mapping(data):
    with pytest.raises(ConfigError, match=r"^stored: the top level must be a mapping"):
        config_from_dict(data, "stored")


@fuzz(200)
@given(
    key=st.sampled_from(ALL_KEYS),
    value=JSON | st.dictionaries(st.text(max_size=4), JSON, min_size=1, max_size=2),
    how=st.sampled_from(["value", "rename"]),
)
def test_config_one_key_changed_names_that_key(fuzz_dir, key, value, how):
    """A valid stored config with one key changed: the error names that key, on its line."""
    data = Config().to_dict()
    head, _, leaf = key.partition(".")
    parent = data[head] if leaf else data
    name = leaf or head
    if how == "rename":
        parent[name + "x"] = parent.pop(name)
        name += "x"
    else:
        parent[name] = value
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    path = fuzz_dir / "changed.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        check_config(load_config(path))
    except ConfigError as err:
        m = check_config_error(err, str(path), text)
        if how == "rename":
            assert m["line"] and f"unknown key '{key + 'x'}'" in m["rest"], str(err)
        else:
            assert name in m["rest"] or re.match(r"\w+: ", m["rest"]), str(
                err
            )  # a cross-key rule names its key


# --- parsers -------------------------------------------------------------------------------------------------

OFFSET = re.compile(r" at char (\d+)$")


def check_parse(text: str) -> None:
    for strict in (False, True):
        call, reason = parse_tool_call(text, strict=strict)
        assert (call is None) != (reason is None)
        if call is not None:
            assert isinstance(call.name, str) and call.name and isinstance(call.args, dict)
            continue
        assert isinstance(reason, str) and 0 < len(reason) < 100, reason
        if m := OFFSET.search(reason):
            assert int(m[1]) <= len(text), (reason, len(text))


PROSE = st.text(max_size=30)
CALLISH = st.builds(
    lambda tool, args, key: json.dumps({key[0]: tool, key[1]: args}),
    JSON,
    JSON,
    st.sampled_from([("tool", "args"), ("name", "arguments"), ("tool", "arguments")]),
)


@fuzz(300)
@given(
    text=st.text(max_size=120)
    | st.builds(
        lambda a, j, b, cut: a + j[:cut] + b,
        PROSE,
        CALLISH | JSON.map(json.dumps),
        PROSE,
        st.integers(0, 200),
    )
    | st.builds(lambda j: f"```json\n{j}\n```", CALLISH)
)
@example(text='{"tool": "a", "args": {"x": ' + "1" * 5000 + "}}")  # was ValueError (int digit limit)
@example(text='{"tool": "a", "args": ' + DEEP)  # was RecursionError
@example(text='{"tool": "a", "arguments": "' + DEEP + '"}')  # was RecursionError in to_tool_call
@example(text="{" + "[" * 100_000 + "} {" + '"tool": "a"}')
@example(text="```json\n" + "{" * 50_000 + "\n```")
def test_parsers_never_raise(text):
    check_parse(text)
    for span in balanced_objects(text):
        assert span.startswith("{") and span in text
    strip_fences(text)
    score = parse_judge_score(text)
    assert score is None or 0.0 <= score <= 10.0


def test_parse_offset_is_in_the_reply():
    """The offset counts from the start of the reply, not of the JSON object found in it."""
    text = 'Sure: {"tool": x}'
    assert parse_tool_call(text) == (None, f"invalid JSON: Expecting value at char {text.index('x')}")
    fenced = '  ```json\n{"tool": x}\n```'
    assert parse_tool_call(fenced, strict=True) == (
        None,
        f"invalid JSON: Expecting value at char {fenced.index('x')}",
    )
    assert (
        parse_tool_call('{"tool": "a", "args": ' + "[" * 5000 + "]" * 5000 + "}")[1]
        == "invalid JSON: nested too deeply"
    )
    assert (
        parse_tool_call('{"tool": "a", "args": {"n": ' + "1" * 5000 + "}}")[1]
        == "invalid JSON: number too long"
    )


@fuzz(200)
@given(
    value=JSON
    | st.dictionaries(
        st.sampled_from(["tool", "name", "args", "arguments", "function", "id"]),
        JSON | JSON.map(json.dumps) | RAW,
        max_size=4,
    )
)
@example(value={"arguments": DEEP})  # was RecursionError
@example(value={"function": {"name": "a", "arguments": "1" * 5000}})
def test_tool_call_from_dict_and_to_tool_call_never_raise(value):
    call = ToolCall.from_dict(value)
    assert isinstance(call.name, str) and isinstance(call.args, dict)
    parsed, reason = to_tool_call(value)
    assert (parsed is None) != (reason is None)


@fuzz(100)
@given(
    name=st.text(max_size=12),
    args=st.dictionaries(st.text(max_size=8), FINITE_JSON, max_size=4),
    call_id=st.none() | st.text(max_size=8),
)
def test_tool_call_round_trips(name, args, call_id):
    call = ToolCall(name, args, call_id)
    assert ToolCall.from_dict(json.loads(json.dumps(call.to_dict()))) == call
