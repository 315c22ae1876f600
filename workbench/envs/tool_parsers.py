"""Parsers for the tool-call formats models are trained to emit natively, one shape out: `list[ToolCall]`.

Each parser takes the assistant's reply text and returns `ParsedReply(calls, content, error)`:
- `calls`: every call in the reply, in order (several = parallel calls in one turn);
- `content`: the reply's text outside the calls (what goes in the assistant message's `content`);
- `error`: None when the reply parsed, `NO_CALL` when it holds no call at all (a plain answer: a right
  reply when the task expects none), else a short reason the UI groups failures by ("invalid JSON in
  <tool_call> 2: ...").

The formats are what vLLM's OpenAI server parses with `--tool-call-parser` of the same name:
- `hermes` (Qwen2.5/3, Hermes): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, repeated;
- `llama3_json` (Llama 3.1/3.2): the reply is `{"name": ..., "parameters": {...}}`, maybe after
  `<|python_tag|>`, several joined by `;`;
- `mistral`: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (the marker is a special token that
  decoding may drop: a reply that is such a JSON list counts too);
- `nemotron` (Nemotron-Nano v2): `<TOOLCALL>[{"name": ..., "arguments": {...}}]</TOOLCALL>`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import InputError
from workbench.types import ToolCall

NO_CALL = "no tool call"


@dataclass
class ParsedReply:
    calls: list[ToolCall] = field(default_factory=list)
    content: str = ""
    error: str | None = None


def _json(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, f"invalid JSON: {e.msg} at char {e.pos}"
    except (ValueError, RecursionError):
        return None, "invalid JSON"


def _call(
    obj: Any, args_keys: tuple[str, ...] = ("arguments", "parameters")
) -> tuple[ToolCall | None, str | None]:
    """One {"name": ..., "arguments"|"parameters": {...}} object as a ToolCall (arguments may be JSON text)."""
    if not isinstance(obj, dict):
        return None, f"a call is a JSON {type(obj).__name__}, not an object"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, "a call has no string 'name'"
    key = next((k for k in args_keys if k in obj), None)
    args = obj.get(key, {}) if key else {}
    if isinstance(args, str):
        args, err = _json(args)
        if err:
            return None, f"'{key}' is a string that is not JSON"
    if not isinstance(args, dict):
        return None, f"'{key}' is not an object"
    cid = obj.get("id") if isinstance(obj.get("id"), str) else None
    return ToolCall(name.strip(), args, cid), None


def _calls(objs: list[Any], what: str) -> ParsedReply | list[ToolCall]:
    out: list[ToolCall] = []
    for i, obj in enumerate(objs, start=1):
        call, err = _call(obj)
        if err:
            return ParsedReply(error=f"{what} {i}: {err}" if len(objs) > 1 else f"{what}: {err}")
        out.append(call)
    return out


_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def parse_hermes(text: str) -> ParsedReply:
    if "<tool_call>" not in text:
        return ParsedReply(content=text.strip(), error=NO_CALL)
    bodies = _HERMES.findall(text)
    objs = []
    for i, body in enumerate(bodies, start=1):
        obj, err = _json(body.strip())
        if err:
            return ParsedReply(
                content=text.strip(),
                error=f"{err} in <tool_call> {i}" if len(bodies) > 1 else f"{err} in <tool_call>",
            )
        objs.append(obj)
    if not text.rstrip().endswith("</tool_call>"):
        return ParsedReply(
            content=text.strip(),
            error="<tool_call> not closed"
            if "</tool_call>" not in text.split("<tool_call>")[-1]
            else "text after </tool_call>",
        )
    calls = _calls(objs, "<tool_call>")
    if isinstance(calls, ParsedReply):
        calls.content = text.strip()
        return calls
    return ParsedReply(calls, text[: text.index("<tool_call>")].strip())


def parse_llama3_json(text: str) -> ParsedReply:
    body = text.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>") :].strip()
    if not body.startswith("{"):
        return ParsedReply(content=text.strip(), error=NO_CALL)
    dec, objs, pos = json.JSONDecoder(), [], 0
    while pos < len(body):  # one object, or several separated by ";" (vLLM's llama3_json accepts both)
        try:
            obj, end = dec.raw_decode(body, pos)
        except json.JSONDecodeError as e:
            return ParsedReply(content=text.strip(), error=f"invalid JSON: {e.msg} at char {e.pos}")
        except (ValueError, RecursionError):
            return ParsedReply(content=text.strip(), error="invalid JSON")
        objs.append(obj)
        rest = body[end:].lstrip()
        if not rest:
            break
        if not rest.startswith(";"):
            return ParsedReply(content=text.strip(), error="text after the JSON object")
        pos = len(body) - len(rest[1:].lstrip())
    if len(objs) > 1:  # Llama 3.x templates refuse to render them back ("only supports single tool-calls")
        return ParsedReply(
            content=text.strip(), error=f"{len(objs)} calls in one turn: this format takes one"
        )
    calls = _calls(objs, "call")
    if isinstance(calls, ParsedReply):
        calls.content = text.strip()
        return calls
    return ParsedReply(calls, "")


def _json_list_after(text: str, start: str, end: str | None) -> ParsedReply:
    """`start` + a JSON list of calls (+ `end`): the shared body of the Mistral and Nemotron formats."""
    head, _, tail = text.partition(start)
    body = tail.strip()
    if end is not None:
        if end not in body:
            return ParsedReply(content=text.strip(), error=f"{start} not closed")
        body, _, after = body.partition(end)
        if after.strip():
            return ParsedReply(content=text.strip(), error=f"text after {end}")
    objs, err = _json(body.strip())
    if err:
        return ParsedReply(content=text.strip(), error=f"{err} after {start}")
    objs = objs if isinstance(objs, list) else [objs]
    if not objs:
        return ParsedReply(content=text.strip(), error=f"empty call list after {start}")
    calls = _calls(objs, "call")
    if isinstance(calls, ParsedReply):
        calls.content = text.strip()
        return calls
    return ParsedReply(calls, head.strip())


def parse_mistral(text: str) -> ParsedReply:
    if "[TOOL_CALLS]" in text:
        return _json_list_after(text, "[TOOL_CALLS]", None)
    if text.strip().startswith("[{"):  # the marker is a special token: decoding may have dropped it
        return _json_list_after("[TOOL_CALLS]" + text.strip(), "[TOOL_CALLS]", None)
    return ParsedReply(content=text.strip(), error=NO_CALL)


def parse_nemotron(text: str) -> ParsedReply:
    if "<TOOLCALL>" not in text:
        return ParsedReply(content=text.strip(), error=NO_CALL)
    return _json_list_after(text, "<TOOLCALL>", "</TOOLCALL>")


PARSERS: dict[str, Callable[[str], ParsedReply]] = {
    "hermes": parse_hermes,
    "llama3_json": parse_llama3_json,
    "mistral": parse_mistral,
    "nemotron": parse_nemotron,
}

# What each format's chat template says about tools: the first parser whose marker the template text holds.
# Order matters: a Llama 3.x template also mentions JSON "name"/"parameters" but none of the others' tags.
TEMPLATE_MARKERS: tuple[tuple[str, str], ...] = (
    ("<tool_call>", "hermes"),
    ("<TOOLCALL>", "nemotron"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3_json"),
    ('"parameters"', "llama3_json"),
    ("ipython", "llama3_json"),
)


class TemplateError(InputError, ValueError):
    """The chat template cannot do native tool calling (and no parser was named)."""


def detect_parser(template: str | None, where: str = "the tokenizer's chat template") -> str:
    """The parser for a chat template, from its text. A template that never mentions tools is an error
    that says what it saw, so a model without tool support is not silently trained in a made-up format."""
    if not template:
        raise TemplateError(
            f"tool_format native: {where} is missing; name the format with tool_parser "
            f"({', '.join(PARSERS)}) or use tool_format: json"
        )
    for marker, name in TEMPLATE_MARKERS:
        if marker in template:
            return name
    head = " ".join(template.split())[:120]
    mentions = (
        "mentions `tools` but no call format this engine knows"
        if "tools" in template
        else "has no tool support (it never reads `tools`)"
    )
    raise TemplateError(
        f"tool_format native: {where} {mentions}; it begins {head!r}. Name the format with "
        f"tool_parser ({', '.join(PARSERS)}) or use tool_format: json (the project's JSON harness)"
    )


def resolve_parser(name: str, template: str | None) -> str:
    """`auto` picks from the template; a named parser is checked against the known ones."""
    if name == "auto":
        return detect_parser(template)
    if name not in PARSERS:
        raise ValueError(f"unknown tool_parser {name!r}; choose one of auto, {', '.join(PARSERS)}")
    return name


# A reply with no call in the model's format that is nevertheless a well-formed call, in another wrapper: the
# parser stays strict (vLLM's parser of the same name would not take it either), only the reason says so.
WRONG_WRAPPER = "call in the wrong wrapper"
WRAPPERS = {
    "hermes": "<tool_call> tags",
    "llama3_json": "a bare JSON object",
    "mistral": "[TOOL_CALLS]",
    "nemotron": "<TOOLCALL> tags",
}
_FENCED = re.compile(r"```([a-zA-Z0-9_-]*)[ \t]*\n(.*?)```", re.DOTALL)


def _is_call(obj: Any) -> bool:
    if isinstance(obj, dict) and "tool" in obj and "name" not in obj:  # the JSON harness's {"tool", "args"}
        obj = {"name": obj["tool"], "arguments": obj.get("args", {})}
    return isinstance(obj, dict) and _call(obj)[0] is not None


def _wholly_calls(body: str) -> bool:
    """`body` is exactly one JSON call object, or a non-empty JSON list of them."""
    obj, err = _json(body.strip())
    objs = obj if isinstance(obj, list) else [obj]
    return err is None and bool(objs) and all(_is_call(o) for o in objs)


def misplaced_call(text: str, parser: str) -> str | None:
    """Why a reply holding no call in `parser`'s format still holds a well-formed one: in a ``` fence (prose
    around it allowed), as bare JSON (the whole reply), or in another format's tags; None when it holds none."""
    want = WRAPPERS.get(parser, parser)
    for m in _FENCED.finditer(text):
        if _wholly_calls(m.group(2)):
            return f"{WRONG_WRAPPER}: a ```{m.group(1)} fence, not {want}"
    body = text.strip()
    if parser != "llama3_json" and body[:1] in ("{", "[") and _wholly_calls(body):
        return f"{WRONG_WRAPPER}: bare JSON, not {want}"
    for other in ("hermes", "nemotron", "mistral"):
        marker = {"hermes": "<tool_call>", "nemotron": "<TOOLCALL>", "mistral": "[TOOL_CALLS]"}[other]
        if other != parser and marker in text and PARSERS[other](text).calls:
            return f"{WRONG_WRAPPER}: {WRAPPERS[other]}, not {want}"
    return None


def parse_reply(text: str, parser: str) -> ParsedReply:
    """The reply parsed strictly by `parser`; a reply with no call in that format but a well-formed call in
    another wrapper gets the reason (`misplaced_call`) instead of NO_CALL, and still no calls."""
    parsed = PARSERS[parser](text)
    if parsed.error == NO_CALL and (why := misplaced_call(text, parser)):
        parsed.error = why
    return parsed
