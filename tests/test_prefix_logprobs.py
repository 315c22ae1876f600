import pytest
import torch

from workbench.logprobs import completion_logprobs
from workbench.prefix_logprobs import common_prefix_len, shared_prefix_logprobs
from workbench.testing import perturb_lora

HARNESS = [5, 17, 33, 8, 91, 12, 7, 44]


@pytest.mark.parametrize(
    "prompts",
    [
        [HARNESS] * 4,  # one group: the whole prompt is shared
        [HARNESS + [60, 61], HARNESS + [70], HARNESS + [60, 61], HARNESS + [80, 81, 82]],  # several groups
        [HARNESS, HARNESS + [70, 71], HARNESS + [72], HARNESS],  # one prompt is the others' prefix
    ],
)
def test_shared_prefix_pass_equals_packed_pass_values_and_gradients(tiny_policy, prompts):
    perturb_lora(tiny_policy, scale=0.5, seed=1)
    model = tiny_policy.model
    comps = [[3, 4, 5, 6], [9], [10, 11, 12], []]
    params = tiny_policy.trainable_parameters()

    def run(fn):
        model.zero_grad(set_to_none=True)
        logp, mask, ent = fn(model, prompts, comps, 0.7, return_entropy=True)
        (logp.sum() * 0.5 + (logp**2).sum() * 0.1).backward()
        return logp.detach(), mask, ent.detach(), [p.grad.detach().clone() for p in params]

    packed, shared = run(completion_logprobs), run(shared_prefix_logprobs)
    assert torch.equal(packed[1], shared[1])
    assert torch.allclose(packed[0], shared[0], atol=1e-5)
    assert torch.allclose(packed[2], shared[2], atol=1e-5)
    for a, b in zip(packed[3], shared[3], strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (a - b).abs().max()
    assert any(g.abs().sum() > 0 for g in shared[3])  # the gradient reached the adapter


def test_common_prefix_len():
    assert common_prefix_len([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_len([[1, 2], [1, 2]]) == 2
    assert common_prefix_len([[1], [2]]) == 0
