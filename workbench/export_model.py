"""Exporting a checkpoint to serve: the LoRA adapter as trained, and a merged HF folder.

`merged/` is the base model with the adapter folded into its weights (peft `merge_and_unload`), saved with
the base model's tokenizer, chat template and generation config: a plain model folder that transformers,
vLLM's OpenAI server (`vllm serve DIR --enable-auto-tool-choice --tool-call-parser hermes`) and TGI load
with no peft. `adapter/` is the checkpoint's adapter (peft format, with the tokenizer), for serving the
adapter on top of the base (`vllm serve BASE --enable-lora --lora-modules NAME=DIR/adapter`). A run with
`adapter: full` has no adapter: its checkpoint is the whole model, written as `merged/`.
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

# vLLM's --tool-call-parser for the formats workbench.envs.tool_parsers detects (same names where vLLM has one).
VLLM_TOOL_PARSERS = {"hermes": "hermes", "llama3_json": "llama3_json", "mistral": "mistral"}


class ExportModelError(InputError, ValueError):
    """The checkpoint asked for does not exist, or the output folder is in the way."""


@dataclass
class ModelExport:
    out: Path
    merged: Path
    adapter: Path | None  # None for adapter: full
    checkpoint: dict[str, Any]
    tool_parser: str | None  # vLLM's --tool-call-parser for the chat template, when it has one

    def serve_command(self) -> str:
        flags = f" --enable-auto-tool-choice --tool-call-parser {self.tool_parser}" if self.tool_parser else ""
        return f"vllm serve {self.merged}{flags}"


def pick_checkpoint(db: sqlite_utils.Database, run_id: int, which: str = "promoted") -> dict[str, Any]:
    """`promoted` (the best that beats the baseline), `latest`, or a step number (its newest checkpoint)."""
    every = store.metrics.list_checkpoints(db, run_id)
    listing = ", ".join(f"step {c['step']} ({c['kind']}{', promoted' if c['promoted'] else ''})" for c in every)
    if not every:
        raise ExportModelError(f"run {run_id} has no checkpoint yet")
    if which == "promoted":
        c = store.metrics.promoted_checkpoint(db, run_id)
        if c is None:
            raise ExportModelError(f"run {run_id} has no promoted checkpoint (none beat the baseline yet); "
                                   f"use --checkpoint latest or a step: {listing}")
        return c
    if which == "latest":
        return every[-1]
    try:
        step = int(which)
    except ValueError:
        raise ExportModelError(f"--checkpoint {which!r} is not promoted, latest or a step number") from None
    at = [c for c in every if c["step"] == step]
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


def export_model(db: sqlite_utils.Database, run_id: int, out: str | Path, which: str = "promoted") -> ModelExport:
    """Write `out/adapter` (LoRA runs) and `out/merged` from run `run_id`'s checkpoint `which`."""
    from transformers import AutoTokenizer

    from workbench.models import load_policy, resolve_model

    run = store.runs.get_run(db, run_id)
    cfg = config_from_dict(run["config"], f"run {run_id} config")
    chosen = pick_checkpoint(db, run_id, which)
    path = Path(chosen["path"])
    problem = ckpt.verify(path)
    if problem is not None:
        raise ckpt.CheckpointError(problem)
    out = Path(out)
    merged, adapter = out / "merged", (out / "adapter" if cfg.adapter == "lora" else None)
    for p in (merged, adapter):
        if p is not None and p.exists():
            raise ExportModelError(f"{p} already exists: remove it or choose another --out")
    policy = load_policy(cfg.model, adapter=cfg.adapter, lora_r=cfg.lora.r, lora_alpha=cfg.lora.alpha,
                         lora_dropout=cfg.lora.dropout, target_modules=cfg.lora.target_modules, dtype=cfg.dtype,
                         adapter_path=path / "adapter")
    model = policy.model.merge_and_unload() if cfg.adapter == "lora" else policy.model
    model.save_pretrained(merged)
    # The base model's own tokenizer (not the policy's left-padded copy): its chat template is what serves.
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.model))
    tokenizer.save_pretrained(merged)
    if adapter is not None:
        shutil.copytree(path / "adapter", adapter)
    parser = _tool_parser(cfg, tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else None)
    (out / "workbench_export.json").write_text(json.dumps({
        "run": run_id, "run_name": run.get("name"), "base_model": cfg.model, "adapter": cfg.adapter,
        "checkpoint": {k: chosen[k] for k in ("id", "step", "kind", "path", "promoted")},
        "tool_format": getattr(cfg, "tool_format", "json"), "vllm_tool_parser": parser,
    }, indent=1))
    return ModelExport(out, merged, adapter, chosen, parser)
