"""Turn a model's reply into a ToolCall, or say in a few words why not.

Only valid JSON counts (no single quotes, no trailing commas): the point of training is to emit what a
real tool API would accept. Lenient mode finds the first balanced JSON object anywhere in the reply (prose
or ``` fences around it are fine); strict mode, used by the valid-JSON metric, needs the whole reply to be
that object. Error strings are short and specific because the UI groups trajectories by them.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from workbench.types import ToolCall

_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)\n?```$", re.DOTALL)


def strip_fences(text: str) -> str:
    """The reply without surrounding whitespace and, if it is wholly one ```lang fence, without the fence."""
    s = text.strip()
    m = _FENCE.match(s)
    return m.group(1).strip() if m else s


def balanced_objects(text: str) -> list[str]:
    """Every top-level {...} span whose braces balance, ignoring braces inside JSON (double-quoted) strings.

    A trailing unclosed span is returned too (so a truncated reply reports "invalid JSON", not "no JSON").
    """
    spans: list[str] = []
    depth, start, in_str, esc = 0, -1, False, False
    for i, ch in enumerate(text):
        if depth == 0:
            if ch == "{":
                depth, start, in_str, esc = 1, i, False, False
            continue
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    if depth > 0:
        spans.append(text[start:])
    return spans


# What json.loads raises on bad input: JSONDecodeError, a plain ValueError for an integer longer than
# sys.get_int_max_str_digits(), RecursionError for nesting deeper than the recursion limit.
_JSON_ERRORS = (ValueError, RecursionError)


def _json_error(e: ValueError | RecursionError, offset: int = 0) -> str:
    """The reason, with the offset in the reply (`offset`: where the decoded text starts in it)."""
    if isinstance(e, json.JSONDecodeError):
        return f"invalid JSON: {e.msg} at char {e.pos + offset}"
    return (
        "invalid JSON: nested too deeply"
        if isinstance(e, RecursionError)
        else "invalid JSON: number too long"
    )


def to_tool_call(obj: Any) -> tuple[ToolCall | None, str | None]:
    """Accept {"tool", "args"} and {"name", "arguments"} (arguments may be a JSON string, as in OpenAI's API)."""
    if not isinstance(obj, dict):
        return None, f"JSON is a {type(obj).__name__}, not an object"
    name = obj.get("tool", obj.get("name"))
    if name is None:
        return None, "missing 'tool'"
    if not isinstance(name, str) or not name.strip():
        return None, "'tool' is not a non-empty string"
    key = "args" if "args" in obj else "arguments"
    args = obj.get(key, {})
    if isinstance(args, str) and key == "arguments":
        try:
            args = json.loads(args)
        except _JSON_ERRORS:
            return None, "'arguments' is a string that is not JSON"
    if not isinstance(args, dict):
        return None, f"'{key}' is not an object"
    return ToolCall(name=name.strip(), args=args), None


def _objects_at_each_brace(text: str, limit: int = 32) -> list[Any]:
    """Fallback for a stray unbalanced "{" in prose that swallows the real object into one span."""
    found, dec, pos = [], json.JSONDecoder(), text.find("{")
    while pos >= 0 and limit > 0:
        limit -= 1
        with contextlib.suppress(*_JSON_ERRORS):
            found.append(dec.raw_decode(text, pos)[0])
        pos = text.find("{", pos + 1)
    return found


NO_JSON = "no JSON object"  # the reply holds no call at all (right when the task expects none)


def parse_tool_calls(text: str) -> tuple[list[ToolCall], str | None]:
    """Every call in a reply (parallel calls: several JSON objects, one per line, or a JSON list of them),
    in order; ([], reason) when there is none. A span that does not decode is the reason, calls or not."""
    body = strip_fences(text)
    if body.startswith("["):
        try:
            objs = json.loads(body)
        except _JSON_ERRORS as e:
            return [], _json_error(e, text.find(body))
        objs = objs if isinstance(objs, list) else [objs]
    else:
        objs = []
        start = 0
        for span in balanced_objects(text):
            start = text.find(span, start)
            try:
                objs.append(json.loads(span))
            except _JSON_ERRORS as e:
                return [], _json_error(e, start)
            start += len(span)
    if not objs:
        return [], NO_JSON
    calls: list[ToolCall] = []
    for obj in objs:
        call, error = to_tool_call(obj)
        if call is None:
            return [], error
        calls.append(call)
    return calls, None


def parse_tool_call(text: str, *, strict: bool = False) -> tuple[ToolCall | None, str | None]:
    """(call, None) or (None, reason). Lenient: first balanced JSON object that decodes, preferring one that
    has a "tool"/"name" key. Strict: the whole reply, fences and surrounding whitespace aside."""
    if strict:
        body = strip_fences(text)
        if not body.startswith("{"):
            return None, "no JSON object" if "{" not in body else "text before the JSON object"
        try:
            obj = json.loads(body)
        except _JSON_ERRORS as e:
            if isinstance(e, json.JSONDecodeError) and e.msg == "Extra data":
                return None, "text after the JSON object"
            return None, _json_error(e, text.find(body))
        return to_tool_call(obj)

    spans = balanced_objects(text)
    if not spans:
        return None, "no JSON object"
    decoded: list[Any] = []
    first_error: str | None = None
    start = 0
    for span in spans:
        start = text.find(span, start)  # spans are in order and each begins at the first "{" after the last
        try:
            decoded.append(json.loads(span))
        except _JSON_ERRORS as e:
            first_error = first_error or _json_error(e, start)
        start += len(span)
    for candidates in (decoded, _objects_at_each_brace(text) if len(spans) > len(decoded) else []):
        for obj in candidates:
            if isinstance(obj, dict) and ("tool" in obj or "name" in obj):
                return to_tool_call(obj)
    if decoded:
        return to_tool_call(decoded[0])
    return None, first_error
