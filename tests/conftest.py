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


# ---- the TUI tests' shared helpers (import them: `from tests.conftest import open_screen, ...`) ----------


@pytest.fixture
def fake(tmp_path: Path):  # -> tests.fake_run.FakeRun
    """A fresh copy of the deterministic fake run (tests/fake_run.py), alive, in tmp_path/wb.db."""
    from tests.fake_run import fake_copy

    return fake_copy(tmp_path / "wb.db")


async def open_dashboard(pilot):  # -> screens.dashboard.DashboardScreen
    from screens.dashboard import DashboardScreen
    from tests.fake_run import wait_until

    app = pilot.app
    await wait_until(
        pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.loaded, what="dashboard"
    )
    return app.screen


async def open_screen(pilot, key: str, cls: type, ready=lambda screen: True):
    """From the loaded dashboard, press `key` and wait until a `cls` screen is on top and `ready(screen)`."""
    from tests.fake_run import wait_until

    app = pilot.app
    await open_dashboard(pilot)
    await pilot.press(key)
    await wait_until(pilot, lambda: isinstance(app.screen, cls) and ready(app.screen), what=cls.__name__)
    return app.screen


def pending_commands(fake) -> list[dict]:
    """The run's commands not yet claimed by a worker, oldest first."""
    import store

    db = store.open_db(fake.db_path)
    try:
        return store.commands.pending(db, fake.run_id)
    finally:
        db.conn.close()


@pytest.fixture
def verifier_path(tmp_path: Path) -> str:
    """The length verifier (tests/trainer_helpers.py) as a file, what a run config's `reward:` names."""
    from tests.trainer_helpers import LENGTH_VERIFIER

    p = tmp_path / "length_verifier.py"
    p.write_text(LENGTH_VERIFIER)
    return str(p)
