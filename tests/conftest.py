"""Shared fixtures: a tiny random Llama + tokenizer (built once per session, offline) and a LoRA policy on it.

Integration tests (the real SmolLM2) are skipped unless selected: `pytest -m integration`.
"""

from __future__ import annotations

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
    if "integration" in (config.getoption("markexpr", "") or ""):
        return
    skip = pytest.mark.skip(reason="real-model test: run with `pytest -m integration`")
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
