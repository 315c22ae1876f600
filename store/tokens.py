"""Compact storage of an episode's token ids and sampling log-probs (the `token_trace` column).

A trace is one dict per assistant turn: `{"prompt_ids", "completion_ids", "logprobs"}`. Stored as
`b"T1" + prefix hash (16 bytes, zeros for none) + zlib(header + uint32 ids + float32 log-probs)`:
- a turn whose prompt extends the previous turn's prompt + completion (token in, token out) keeps only the
  new ids (the tool result and the next assistant header), so a 4-turn episode is not 4 copies of the harness;
- the first prompt's leading ids shared with the rest of the step (`token_prefix_len`) live once in the
  `prefixes` table, referenced by hash.
Log-probs are float32: the ratio they enter is exp(new - old), and float32 keeps 7 digits.
"""

from __future__ import annotations

import sys
import zlib
from array import array
from typing import Any

MAGIC = b"T1"
NO_PREFIX = bytes(16)


def ids_bytes(ids: list[int]) -> bytes:
    a = array("I", ids)
    if sys.byteorder == "big":  # stored little-endian whatever the machine
        a.byteswap()
    return a.tobytes()


def ids_from_bytes(raw: bytes) -> list[int]:
    return _array("I", raw).tolist()


def encode_trace(trace: list[dict[str, Any]], prefix_hash: bytes | None = None, prefix_len: int = 0) -> bytes:
    """`trace` as a blob; the first `prefix_len` prompt ids are left out (they are the prefix `prefix_hash`)."""
    header = array("I", [len(trace)])
    ids = array("I")
    logps = array("f")
    prev: list[int] | None = None
    for i, seg in enumerate(trace):
        prompt, comp, lp = list(seg["prompt_ids"]), list(seg["completion_ids"]), list(seg["logprobs"])
        if len(lp) != len(comp):
            raise ValueError(f"token_trace[{i}]: {len(lp)} logprobs for {len(comp)} completion ids")
        if prev is not None and len(prompt) >= len(prev) and prompt[: len(prev)] == prev:
            header.extend([1, len(prompt) - len(prev), len(comp)])
            ids.extend(prompt[len(prev) :])
        else:
            skip = prefix_len if i == 0 else 0
            header.extend([0, len(prompt) - skip, len(comp)])
            ids.extend(prompt[skip:])
        ids.extend(comp)
        logps.extend(lp)
        prev = prompt + comp
    for a in (header, ids, logps):
        if sys.byteorder == "big":
            a.byteswap()
    body = header.tobytes() + ids.tobytes() + logps.tobytes()
    return MAGIC + (prefix_hash or NO_PREFIX) + zlib.compress(body, 1)


def trace_prefix(blob: bytes) -> bytes | None:
    """The token prefix hash a blob refers to, or None."""
    h = blob[2:18]
    return None if h == NO_PREFIX else h


def _array(typecode: str, raw: bytes) -> array:
    a = array(typecode)
    a.frombytes(raw)
    if sys.byteorder == "big":
        a.byteswap()
    return a


def decode_trace(blob: bytes, prefix_ids: list[int] | None = None) -> list[dict[str, Any]]:
    """The trace `encode_trace` stored; `prefix_ids` are the ids of its prefix hash (if it has one)."""
    if blob[:2] != MAGIC:
        raise ValueError("not a token trace (bad magic)")
    body = zlib.decompress(blob[18:])
    count = _array("I", body[:4])[0]
    header = _array("I", body[4 : 4 + 12 * count])
    rest = body[4 + 12 * count :]
    n_ids = sum(header[3 * i + 1] + header[3 * i + 2] for i in range(count))
    ids = _array("I", rest[: 4 * n_ids])
    logps = _array("f", rest[4 * n_ids :])
    out: list[dict[str, Any]] = []
    pos = lp_pos = 0
    prev: list[int] = []
    for i in range(count):
        extends, n_prompt, n_comp = header[3 * i], header[3 * i + 1], header[3 * i + 2]
        new = ids[pos : pos + n_prompt].tolist()
        pos += n_prompt
        head = prev if extends else list(prefix_ids or []) if i == 0 else []
        prompt = head + new
        comp = ids[pos : pos + n_comp].tolist()
        pos += n_comp
        out.append(
            {
                "prompt_ids": prompt,
                "completion_ids": comp,
                "logprobs": logps[lp_pos : lp_pos + n_comp].tolist(),
            }
        )
        lp_pos += n_comp
        prev = prompt + comp
    return out
