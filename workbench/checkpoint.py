"""Checkpoints: the adapter in peft format plus everything needed to continue bit-for-bit on CPU
(optimizer, scheduler, RNG states, step, the live learning rate and temperature).

A checkpoint is written to a temp folder with a manifest (each file's size and sha256) written last, then
renamed into place; `load` checks the manifest first, so a torn or truncated checkpoint is an error that
names the file, never a silently wrong resume (the trainer then falls back to the previous one).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch

from store import DiskFullError
from workbench.errors import StoredDataError

MANIFEST = "manifest.json"


class CheckpointError(StoredDataError, RuntimeError):
    """A checkpoint that cannot be used; the message names the file and what is wrong with it."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_disk_full(exc: BaseException) -> bool:
    """A write the disk refused: ENOSPC, EFBIG (past RLIMIT_FSIZE), EDQUOT, EIO, or torch's zip writer saying
    the same in its own words ("unexpected pos" when a short write left the stream behind its count)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO):
        return True
    text = str(exc)
    return any(
        s in text
        for s in (
            "unexpected pos",
            "failed writing",
            "No space left",
            "File too large",
            "Disk quota exceeded",
        )
    )


def save(
    path: Path, *, policy: Any, optimizer: torch.optim.Optimizer, scheduler: Any, state: dict[str, Any]
) -> Path:
    """Write to a temp folder, then rename: a kill mid-save never leaves a half checkpoint behind. A write
    that fails (a full disk) removes the temp folder, so the space it took is free again for the run's
    "crashed" status, and is raised as store.DiskFullError naming the folder."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        _write(tmp, policy=policy, optimizer=optimizer, scheduler=scheduler, state=state)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, Exception) and _is_disk_full(exc):
            raise DiskFullError(
                f"{tmp}: the checkpoint could not be written ({type(exc).__name__}: {str(exc)[:200]}: the disk is "
                "full or failing); the partial copy was removed and the previous checkpoints are untouched; "
                "free space, then resume the run"
            ) from exc
        raise
    return _put_in_place(tmp, path)


def _write(
    tmp: Path, *, policy: Any, optimizer: torch.optim.Optimizer, scheduler: Any, state: dict[str, Any]
) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    policy.save_adapter(tmp / "adapter")
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            **state,
        },
        tmp / "trainer_state.pt",
    )
    files = _files(tmp)
    for f in files:  # on disk before the manifest that vouches for them
        _fsync(f)
    manifest = {str(f.relative_to(tmp)): {"size": f.stat().st_size, "sha256": _sha256(f)} for f in files}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    _fsync(tmp / MANIFEST)


def _put_in_place(tmp: Path, path: Path) -> Path:
    if path.exists():  # rewritten (a redone step): the old one stays whole until the new one is in place
        old = path.with_name(path.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
        os.replace(tmp, path)  # a kill before this line leaves `old` whole: `recover` puts it back
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)
    _fsync(path.parent)  # the rename itself on disk
    return path


def verify(path: Path) -> str | None:
    """None when the checkpoint at `path` is whole, else why not (naming the file)."""
    if not path.is_dir():
        return f"{path}: no such checkpoint folder"
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        # `save` writes the manifest before the rename, so a checkpoint in place without one was written by an
        # older Workbench or by something else, or lost it since: nothing vouches for its bytes (a torn adapter
        # would crash the resume, flipped weights would be trained on), so it is refused, never loaded blindly.
        return (
            f"{manifest_path}: missing, so nothing vouches for the files beside it (the checkpoint was not "
            "completely written, or comes from before manifests); not loaded"
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError as exc:
        return f"{manifest_path}: unreadable ({exc})"
    if not isinstance(manifest, dict) or not all(
        isinstance(w, dict) and isinstance(w.get("size"), int) and isinstance(w.get("sha256"), str)
        for w in manifest.values()
    ):
        return f"{manifest_path}: not a Workbench manifest (each file's size and sha256)"
    # Every file the load reads must be vouched for: a manifest that leaves one out vouches for nothing there.
    unlisted = [str(f.relative_to(path)) for f in _files(path) if str(f.relative_to(path)) not in manifest]
    if unlisted or "trainer_state.pt" not in manifest:
        return f"{manifest_path}: does not list {', '.join(unlisted) or 'trainer_state.pt'}; not loaded"
    for name, want in manifest.items():
        f = path / name
        if not f.is_file():
            return f"{f}: missing"
        size = f.stat().st_size
        if size != want["size"]:
            return f"{f}: torn ({size} bytes, {want['size']} written)"
        if _sha256(f) != want["sha256"]:
            return f"{f}: corrupt (sha256 differs from the manifest)"
    return None


def recover(path: Path) -> None:
    """Put back the previous copy of a rewritten checkpoint when a kill came between `save`'s two renames."""
    old = path.with_name(path.name + ".old")
    if not path.exists() and old.is_dir() and verify(old) is None:
        os.replace(old, path)


def load(
    path: Path, *, policy: Any, optimizer: torch.optim.Optimizer, scheduler: Any, check: bool = True
) -> dict[str, Any]:
    """Restore a checkpoint in place; raises CheckpointError (nothing loaded) when it is not whole.
    `check=False` skips the hashing when the caller has just verified it."""
    problem = verify(path) if check else None
    if problem is not None:
        raise CheckpointError(problem)
    policy.load_adapter(path / "adapter")
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    optimizer.load_state_dict(state.pop("optimizer"))
    sched = state.pop("scheduler")
    if scheduler is not None and sched is not None:
        scheduler.load_state_dict(sched)
    torch.set_rng_state(state.pop("torch_rng"))
    random.setstate(state.pop("python_rng"))
    return state
