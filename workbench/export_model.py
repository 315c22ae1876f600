"""Exporting a checkpoint to serve: the LoRA adapter as trained, and a merged HF folder.

`merged/` is the base model with the adapter folded into its weights (peft `merge_and_unload`), saved with
the base model's tokenizer, chat template and generation config: a plain model folder that transformers,
vLLM's OpenAI server (`vllm serve DIR --enable-auto-tool-choice --tool-call-parser hermes`) and TGI load
with no peft. `adapter/` is the checkpoint's adapter (peft format, with the tokenizer), for serving the
adapter on top of the base (`vllm serve BASE --enable-lora --lora-modules NAME=DIR/adapter`). A run with
`adapter: full` has no adapter: its checkpoint is the whole model, written as `merged/`.

`harness.json` and `README.md` beside them say how the model was asked during training, which is how it must
be asked when served: a `tool_format: json` run learned to answer one system prompt (the tool list), after one
example exchange, with its reply forced to start with the prefill, and it writes `{"tool": ..., "args": ...}`
as text; without them the weights alone answer worse than the evals said.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

import store
from workbench import checkpoint as ckpt
from workbench.config import config_from_dict
from workbench.errors import InputError
from workbench.run.records import Checkpoint, Run

# vLLM's --tool-call-parser for the formats workbench.envs.tool_parsers detects (same names where vLLM has one).
VLLM_TOOL_PARSERS = {"hermes": "hermes", "llama3_json": "llama3_json", "mistral": "mistral"}


class ExportModelError(InputError, ValueError):
    """The checkpoint asked for does not exist, or the output folder is in the way."""


@dataclass
class ModelExport:
    out: Path
    merged: Path
    adapter: Path | None  # None for adapter: full
    checkpoint: Checkpoint
    tool_parser: str | None  # vLLM's --tool-call-parser for the chat template, when it has one

    def serve_command(self) -> str:
        flags = (
            f" --enable-auto-tool-choice --tool-call-parser {self.tool_parser}" if self.tool_parser else ""
        )
        return f"vllm serve {self.merged}{flags}"


def pick_checkpoint(db: sqlite_utils.Database, run_id: int, which: str = "promoted") -> Checkpoint:
    """`promoted` (the best that beats the baseline), `latest`, or a step number (its newest checkpoint)."""
    every = [Checkpoint.from_row(c) for c in store.metrics.list_checkpoints(db, run_id)]
    listing = ", ".join(f"step {c.step} ({c.kind}{', promoted' if c.promoted else ''})" for c in every)
    if not every:
        raise ExportModelError(f"run {run_id} has no checkpoint yet")
    if which == "promoted":
        row = store.metrics.promoted_checkpoint(db, run_id)
        if row is None:
            raise ExportModelError(
                f"run {run_id} has no promoted checkpoint (none beat the baseline yet); "
                f"use --checkpoint latest or a step: {listing}"
            )
        return Checkpoint.from_row(row)
    if which == "latest":
        return every[-1]
    try:
        step = int(which)
    except ValueError:
        raise ExportModelError(f"--checkpoint {which!r} is not promoted, latest or a step number") from None
    at = [c for c in every if c.step == step]
    if not at:
        raise ExportModelError(f"run {run_id} has no checkpoint at step {step}; it has: {listing}")
    return at[-1]


def _tool_parser(cfg: Any, template: str | None) -> str | None:
    """vLLM's tool parser for what the run trained: its native format (named, or read from the chat template);
    None for a JSON-harness run (no vLLM parser reads `{"tool": ..., "args": ...}`) or a format vLLM lacks."""
    if getattr(cfg, "tool_format", "json") != "native":
        return None
    named = getattr(cfg, "tool_parser", "auto")
    if named != "auto":
        return VLLM_TOOL_PARSERS.get(named)
    try:
        from workbench.envs.tool_parsers import detect_parser

        return VLLM_TOOL_PARSERS.get(detect_parser(template))
    except Exception:  # a template with no tool format it recognises: nothing to suggest
        return None


def export_model(
    db: sqlite_utils.Database, run_id: int, out: str | Path, which: str = "promoted"
) -> ModelExport:
    """Write `out/adapter` (LoRA runs) and `out/merged` from run `run_id`'s checkpoint `which`."""
    from transformers import AutoTokenizer

    from workbench.models import load_policy, resolve_model

    run = Run.from_row(store.runs.get_run(db, run_id))
    cfg = config_from_dict(run.config, f"run {run_id} config")
    chosen = pick_checkpoint(db, run_id, which)
    path = Path(chosen.path)
    problem = ckpt.verify(path)
    if problem is not None:
        raise ckpt.CheckpointError(problem)
    out = Path(out)
    merged, adapter = out / "merged", (out / "adapter" if cfg.adapter == "lora" else None)
    for p in (merged, adapter):
        if p is not None and p.exists():
            raise ExportModelError(f"{p} already exists: remove it or choose another --out")
    policy = load_policy(
        cfg.model,
        adapter=cfg.adapter,
        lora_r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        dtype=cfg.dtype,
        adapter_path=path / "adapter",
    )
    model = policy.model.merge_and_unload() if cfg.adapter == "lora" else policy.model
    model.save_pretrained(merged)
    # The base model's own tokenizer (not the policy's left-padded copy): its chat template is what serves.
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.model))
    tokenizer.save_pretrained(merged)
    if adapter is not None:
        shutil.copytree(path / "adapter", adapter)
    parser = _tool_parser(cfg, tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else None)
    write_harness(out, run, cfg, parser)
    (out / "workbench_export.json").write_text(
        json.dumps(
            {
                "run": run_id,
                "run_name": run.name,
                "base_model": cfg.model,
                "adapter": cfg.adapter,
                # promoted as the store keeps it (0/1)
                "checkpoint": {
                    "id": chosen.id,
                    "step": chosen.step,
                    "kind": chosen.kind,
                    "path": chosen.path,
                    "promoted": int(chosen.promoted),
                },
                "tool_format": getattr(cfg, "tool_format", "json"),
                "vllm_tool_parser": parser,
            },
            indent=1,
        )
    )
    return ModelExport(out, merged, adapter, chosen, parser)


# ---- the harness: how to ask the exported model ----------------------------------------------------------

JSON_REPLY_FORMAT = '{"tool": "<tool name>", "args": {"<arg>": "<value>"}}'


def run_tools(cfg: Any) -> tuple[list[dict[str, Any]] | None, str | None]:
    """(the tools the run's training tasks offered, as OpenAI function specs; None when there is no one set)
    and a note when None: an MCP run's servers list theirs at run time, tasks may offer several sets."""
    from workbench.domains.calendar import BUILTIN_TOOLS, MULTI_TURN_TOOLS
    from workbench.tasks import load_task_source, openai_tool_spec

    if cfg.env == "mcp":
        return None, "the tools are the run's MCP servers' list_tools, narrowed to their allowlists"
    try:
        tasks = load_task_source(cfg.tasks, "train")
    except Exception as e:  # a relative path read from another folder, a file since moved
        return None, f"the run's tasks ({cfg.tasks}) could not be read here ({type(e).__name__}: {e})"
    default = MULTI_TURN_TOOLS if cfg.env == "multi_turn" else BUILTIN_TOOLS
    sets: dict[
        str, list[dict[str, Any]]
    ] = {}  # keyed canonically; the value keeps the order the prompt shows
    for t in tasks:
        tools = t.tools if t.tools is not None else default
        sets.setdefault(json.dumps(tools, sort_keys=True), tools)
    if len(sets) > 1:
        return None, f"the run's tasks offer {len(sets)} different tool sets: give each request its own"
    return [openai_tool_spec(t) for t in next(iter(sets.values()))], None


def harness_manifest(run: Run, cfg: Any, parser: str | None) -> dict[str, Any]:
    """What harness.json holds: everything put around a request in training, and how replies were read."""
    from workbench.envs.harness import Harness, harness_from_config, render_tools

    tools, note = run_tools(cfg)
    generation = {
        "max_new_tokens": cfg.max_completion_length,
        "evals": "greedy (do_sample=False)",
        "training temperature": cfg.temperature,
    }
    if getattr(cfg, "tool_format", "json") == "native":
        return {
            "tool_format": "native",
            "env": cfg.env,
            "tool_parser": parser or cfg.tool_parser,
            "system_prompt": cfg.harness.system_prompt,
            "tools": tools,
            "tools_note": note,
            "reply": "the chat template's own tool-call format; pass `tools` to apply_chat_template",
            "generation": generation,
        }
    stored = run.harness
    h = Harness.from_dict(stored) if isinstance(stored, dict) else harness_from_config(cfg.harness)
    multi = cfg.env != "single_turn"
    system = (
        h.system_prompt.replace("{tools}", render_tools([t["function"] for t in tools])) if tools else None
    )
    if system is not None and multi and h.multi_turn_note:
        system += "\n" + h.multi_turn_note
    return {
        "tool_format": "json",
        "env": cfg.env,
        "system_prompt": system,  # the template below with the tools filled in (and the multi-turn note)
        "system_prompt_template": h.system_prompt,
        "tools": tools,
        "tools_note": note,
        "example": (
            [
                {"role": "user", "content": h.example_user},
                {"role": "assistant", "content": h.example_assistant},
            ]
            if h.include_example
            else []
        ),
        "prefill": h.prefill,
        "no_prefill_datasets": h.no_prefill_datasets,
        "multi_turn": {
            "note": h.multi_turn_note,
            "observation_role": h.observation_role,
            "finish_tool": "finish",
            "max_turns": cfg.max_turns,
        }
        if multi
        else None,
        "reply": JSON_REPLY_FORMAT,
        "parser": "the first balanced JSON object of the reply (prefill included) with keys tool and args "
        "(workbench.envs.parse.parse_tool_call)",
        "generation": generation,
    }


def write_harness(out: Path, run: Run, cfg: Any, parser: str | None) -> None:
    """`out/harness.json` and `out/README.md` (how to call the model, with the serve line)."""
    h = harness_manifest(run, cfg, parser)
    (out / "harness.json").write_text(json.dumps(h, indent=1) + "\n")
    (out / "README.md").write_text(harness_readme(run, cfg, h, parser))


def harness_readme(run: Run, cfg: Any, h: dict[str, Any], parser: str | None) -> str:
    head = (
        f"# {run.name}: run {run.id} of {cfg.model}, exported by `workbench export-model`\n\n"
        "`merged/` is a plain transformers folder (base + adapter merged); `adapter/` (LoRA runs) the adapter "
        "alone; `harness.json` how the model was asked in training, which is how to ask it now. The code below "
        "runs from this folder.\n\n"
    )
    if h["tool_format"] == "native":
        flags = f" --enable-auto-tool-choice --tool-call-parser {parser}" if parser else ""
        return head + (
            "It was trained in its chat template's own tool-call format: send OpenAI chat requests with `tools` "
            "(harness.json has the run's) and read `tool_calls` back.\n\n"
            f"```bash\nvllm serve merged{flags}\n```\n"
            + (
                ""
                if parser
                else "\nvLLM has no --tool-call-parser for this format: parse the text replies.\n"
            )
        )
    tools = (
        "`harness.json`'s `system_prompt` already lists the run's tools."
        if h["system_prompt"]
        else f"Fill `{{tools}}` of `system_prompt_template` with each request's tools ({h['tools_note']})."
    )
    multi = (
        (
            "\nMulti-turn: run each call, send its result back as a `"
            f"{h['multi_turn']['observation_role']}` message, generate again (with the prefill) until it "
            "calls `finish` (its `answer` is the reply to the user).\n"
        )
        if h["multi_turn"]
        else ""
    )
    return head + (
        "It answers a request with one JSON object as plain text, `"
        + JSON_REPLY_FORMAT
        + "`, when asked the way "
        "it was trained: the system prompt, the example exchange, the request, and the assistant reply started "
        f"with the prefill `{h['prefill']}` (tokenised on its own, as in training). {tools} No vLLM "
        "`--tool-call-parser` reads this format: serve it for completions and parse the text.\n\n"
        "```python\n"
        "import json\n\n"
        "import torch\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        'h = json.load(open("harness.json"))\n'
        'tok = AutoTokenizer.from_pretrained("merged")\n'
        'model = AutoModelForCausalLM.from_pretrained("merged")\n'
        'request = "Book time with Kim next Sunday at 12 PM."\n'
        'messages = [{"role": "system", "content": h["system_prompt"]}, *h["example"], '
        '{"role": "user", "content": request}]\n'
        "ids = tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),\n"
        '          add_special_tokens=False)["input_ids"]\n'
        'ids += tok(h["prefill"], add_special_tokens=False)["input_ids"]\n'
        'out = model.generate(input_ids=torch.tensor([ids]), max_new_tokens=h["generation"]["max_new_tokens"],\n'
        "                     do_sample=False)\n"
        'reply = h["prefill"] + tok.decode(out[0, len(ids):], skip_special_tokens=True)\n'
        'print(reply)  # {"tool": ..., "args": {...}}: take the first balanced {...} and json.loads it\n'
        "```\n"
        + multi
        + (
            "\nTasks of the datasets in `no_prefill_datasets` (where no call may be the right answer) were asked "
            "without the prefill.\n"
            if h["no_prefill_datasets"]
            else ""
        )
    )
