"""Checkpoints: whole or refused by name. A torn file is found before anything is loaded."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
from pathlib import Path

import pytest
import torch

import store
from workbench import checkpoint as ckpt


def _save(tmp_path, policy, name="step-00003-periodic"):
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    return ckpt.save(tmp_path / name, policy=policy, optimizer=opt, scheduler=None, state={"step": 3}), opt


def test_a_whole_checkpoint_verifies_and_loads(tmp_path, tiny_policy):
    path, opt = _save(tmp_path, tiny_policy)
    assert ckpt.verify(path) is None
    assert ckpt.load(path, policy=tiny_policy, optimizer=opt, scheduler=None)["step"] == 3
    assert not (tmp_path / "step-00003-periodic.tmp").exists()


def test_a_torn_file_is_named_and_nothing_is_loaded(tmp_path, tiny_policy):
    path, opt = _save(tmp_path, tiny_policy)
    weights = next((path / "adapter").glob("*.safetensors"))
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    before = [p.detach().clone() for p in tiny_policy.trainable_parameters()]
    problem = ckpt.verify(path)
    assert problem is not None and weights.name in problem and "torn" in problem
    try:
        ckpt.load(path, policy=tiny_policy, optimizer=opt, scheduler=None)
    except ckpt.CheckpointError as exc:
        assert weights.name in str(exc)
    else:
        raise AssertionError("a torn checkpoint loaded")
    assert all(torch.equal(a, b) for a, b in zip(before, tiny_policy.trainable_parameters(), strict=True))
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, one bit flipped
    assert "corrupt" in ckpt.verify(path)


def test_missing_manifest_or_folder_is_reported(tmp_path, tiny_policy):
    path, opt = _save(tmp_path, tiny_policy)
    (path / ckpt.MANIFEST).unlink()
    # nothing vouches for the files: refused like a torn one (the resume then takes the one before), never
    # loaded blindly, even when every file is there
    assert "manifest.json: missing" in ckpt.verify(path)
    try:
        ckpt.load(path, policy=tiny_policy, optimizer=opt, scheduler=None)
    except ckpt.CheckpointError as exc:
        assert "manifest.json: missing" in str(exc)
    else:
        raise AssertionError("a checkpoint without a manifest loaded")
    assert "no such checkpoint folder" in ckpt.verify(tmp_path / "nope")


def test_a_manifest_that_leaves_a_file_out_vouches_for_nothing(tmp_path, tiny_policy):
    path, _ = _save(tmp_path, tiny_policy)
    manifest = json.loads((path / ckpt.MANIFEST).read_text())
    del manifest["trainer_state.pt"]
    (path / ckpt.MANIFEST).write_text(json.dumps(manifest))
    assert "does not list trainer_state.pt" in ckpt.verify(path)
    (path / ckpt.MANIFEST).write_text("[]")
    assert "not a Workbench manifest" in ckpt.verify(path)


@contextlib.contextmanager
def _file_size_limit(limit: int):
    """Writes past `limit` bytes a file fail with EFBIG (what a full disk does to a write), in this process only:
    the soft RLIMIT_FSIZE is lowered and put back (SIGXFSZ ignored meanwhile, else it would end the process)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


@pytest.mark.parametrize("where", ["adapter", "trainer_state"])
def test_a_full_disk_mid_checkpoint_is_a_clear_error_and_leaves_no_tmp(
    tmp_path, tiny_policy, monkeypatch, where
):
    path = tmp_path / "step-00003-periodic"
    limits = contextlib.ExitStack()
    if where == "adapter":
        limits.enter_context(_file_size_limit(1024))
    else:  # the disk fills after the adapter is written: torch.save's zip writer fails ("unexpected pos")
        save_adapter = tiny_policy.save_adapter

        def then_full(folder):
            save_adapter(folder)
            limits.enter_context(_file_size_limit(1024))

        monkeypatch.setattr(tiny_policy, "save_adapter", then_full)
    with limits, pytest.raises(store.DiskFullError) as ei:
        _save(tmp_path, tiny_policy)
    assert str(ei.value).startswith(f"{path}.tmp: the checkpoint could not be written")
    assert "the disk is full or failing" in str(ei.value) and "free space, then resume" in str(ei.value)
    assert list(tmp_path.iterdir()) == []  # no .tmp folder left, nothing half in place


def test_rewriting_a_checkpoint_keeps_the_old_one_until_the_new_one_is_in_place(
    tmp_path, tiny_policy, monkeypatch
):
    path, opt = _save(tmp_path, tiny_policy)
    first = [p.detach().clone() for p in tiny_policy.trainable_parameters()]
    with torch.no_grad():
        for p in tiny_policy.trainable_parameters():
            p.add_(1.0)
    real_replace = ckpt.os.replace

    def killed_between_the_renames(src, dst):
        if str(src).endswith(".tmp"):
            raise KeyboardInterrupt("killed")  # the old copy is already moved aside, the new one not in place
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", killed_between_the_renames)
    with contextlib.suppress(KeyboardInterrupt):
        _save(tmp_path, tiny_policy)
    monkeypatch.setattr(ckpt.os, "replace", real_replace)
    assert not path.exists() and (tmp_path / "step-00003-periodic.old").is_dir()
    ckpt.recover(path)  # what resume does first: the whole old copy is put back
    assert ckpt.verify(path) is None
    ckpt.load(path, policy=tiny_policy, optimizer=opt, scheduler=None)
    assert all(torch.equal(a, b) for a, b in zip(first, tiny_policy.trainable_parameters(), strict=True))
    path2, _ = _save(tmp_path, tiny_policy)  # and a normal rewrite leaves no .old behind
    assert path2 == path and ckpt.verify(path) is None
    assert not (tmp_path / "step-00003-periodic.old").exists()


def test_resume_skips_a_torn_checkpoint_for_the_one_before(tiny_model, tmp_path):
    import store
    from workbench.config import config_from_dict
    from workbench.trainer import Trainer

    cfg = config_from_dict(
        dict(
            model=str(tiny_model),
            num_generations_per_prompt=2,
            prompts_per_step=1,
            max_completion_length=4,
            max_steps=3,
            eval_interval=1000,
            checkpoint_interval=1,
            eval_max_tasks=1,
            output_dir=str(tmp_path),
            lora={"r": 4, "alpha": 8},
            seed=1,
        )
    )
    db = store.open_db(tmp_path / "wb.db")
    run_id = store.runs.create_run(db, name="t", model=cfg.model, config=cfg.to_dict())
    logs: list[str] = []
    t = Trainer(cfg, db, run_id, log=logs.append)
    t.sft_done = True
    for _ in range(2):
        t.train_step()
        t.save_checkpoint("periodic")
    newest = store.metrics.latest_checkpoint(db, run_id)
    weights = next((Path(newest["path"]) / "adapter").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    again = Trainer(cfg, db, run_id, log=logs.append)
    assert again.resume() == 1
    assert any(weights.name in line and "not usable" in line for line in logs)
    events = [e["message"] for e in store.runs.events_since(db, run_id)]
    assert any(weights.name in m for m in events)


def test_a_torn_sft_checkpoint_with_kl_to_sft_refuses_to_resume_by_name(tiny_model, tmp_path):
    """The KL reference must be the SFT policy: without a whole SFT checkpoint, no silent other reference."""
    import store
    from workbench.config import config_from_dict
    from workbench.trainer import Trainer

    cfg = config_from_dict(
        dict(
            model=str(tiny_model),
            num_generations_per_prompt=2,
            prompts_per_step=1,
            max_completion_length=4,
            max_steps=2,
            eval_interval=1000,
            checkpoint_interval=1,
            eval_max_tasks=1,
            sft_steps=1,
            sft_batch_size=2,
            beta=0.1,
            reference="sft",
            output_dir=str(tmp_path),
            lora={"r": 4, "alpha": 8},
            seed=1,
        )
    )
    db = store.open_db(tmp_path / "wb.db")
    run_id = store.runs.create_run(db, name="t", model=cfg.model, config=cfg.to_dict())
    t = Trainer(cfg, db, run_id)
    t.run_sft_phase()
    t.train_step()
    t.save_checkpoint("periodic")
    sft = next(c for c in store.metrics.list_checkpoints(db, run_id) if c["kind"] == "sft")
    weights = next((Path(sft["path"]) / "adapter").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    try:
        Trainer(cfg, db, run_id).resume()
    except ckpt.CheckpointError as exc:
        assert "no whole SFT checkpoint" in str(exc)
    else:
        raise AssertionError("resumed with a KL reference that is not the SFT policy")
    assert any(weights.name in e["message"] for e in store.runs.events_since(db, run_id))
