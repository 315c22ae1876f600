"""Shared fixtures: a tiny random Llama + tokenizer (built once per session, offline) and a LoRA policy on it.

Integration tests (the real SmolLM2) run unless WORKBENCH_SKIP_INTEGRATION=1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

try:  # the repo is not pip-installed in every venv: make `import workbench` work from a checkout
    import workbench  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.models import Policy, load_policy  # noqa: E402
from workbench.testing import tiny_model_dir  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Integration tests (the real SmolLM2) run by default, as `make test` and CI do; set
    WORKBENCH_SKIP_INTEGRATION=1 (or `-m "not integration"`) for a quick loop."""
    if not os.environ.get("WORKBENCH_SKIP_INTEGRATION"):
        return
    skip = pytest.mark.skip(reason="WORKBENCH_SKIP_INTEGRATION is set")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of a tiny random LlamaForCausalLM (hidden 32, 2 layers, 4 heads) with a chat-template tokenizer."""
    return tiny_model_dir(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture
def tiny_policy(tiny_model: Path) -> Policy:
    """A fresh LoRA (r=4) policy on the tiny model; its adapter starts at zero (B = 0), like a real one."""
    return load_policy(tiny_model, adapter="lora", lora_r=4, lora_alpha=8, seed=0)
