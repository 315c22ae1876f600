"""scripts/gpu_check.sh --smoke: the GPU check's own code on the CPU, in a Python that cannot import what a
bare GPU machine lacks (textual, sqlite-utils, vLLM; hence also the store and the UI), TRL's comparison included."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# vllm is not blocked: it is absent from the suite's venv already (make test-vllm has its own), and blocking it
# here would raise out of the importlib.util.find_spec probes (TRL's) that see a missing package as None.
BLOCK = """
import importlib.abc, sys
class _Bare(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("textual", "sqlite_utils", "store", "screens"):
            raise ImportError(f"{name} is not on the bare GPU machine")
sys.meta_path.insert(0, _Bare())
"""


def test_gpu_check_smoke_runs_without_store_ui_or_vllm(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK)
    env = {**os.environ, "PYTHONPATH": str(site), "OUT": str(tmp_path / "out"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_check.sh"), "--smoke"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "out/grpo_smoke.json").read_text())
    (result,) = report["results"]
    assert result["model"] == "smoke" and len(result["steps"]) == 2
    assert all(s["completion_tokens"] > 0 and s["step_s"] > 0 for s in result["steps"])
    assert result["trainable"] > 0 and result["peak_cuda_mem_gib"] is None
    # trl is in the dev extra, so the comparison with TRL's GRPOTrainer runs too, on the same shape and batch
    (trl,) = report["trl"]
    assert trl["trainer"] == "trl" and trl["model"] == "smoke" and len(trl["steps"]) == 2
    assert all(s["step_s"] > 0 and s["completion_tokens"] > 0 for s in trl["steps"])
