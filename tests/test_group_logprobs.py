import torch

from workbench.group_logprobs import group_logprobs
from workbench.logprobs import completion_logprobs
from workbench.testing import perturb_lora


def test_shared_prompt_pass_equals_packed_pass_values_and_gradients(tiny_policy):
    perturb_lora(tiny_policy, scale=0.5, seed=1)
    model = tiny_policy.model
    prompt = [5, 17, 33, 8, 91, 12, 7]
    comps = [[3, 4, 5, 6], [9], [10, 11, 12], []]
    params = tiny_policy.trainable_parameters()

    def run(fn):
        model.zero_grad(set_to_none=True)
        logp, mask, ent = fn()
        (logp.sum() * 0.5 + (logp ** 2).sum() * 0.1).backward()
        return logp.detach(), mask, ent.detach(), [p.grad.detach().clone() for p in params]

    packed = run(lambda: completion_logprobs(model, [prompt] * 4, comps, 0.7, return_entropy=True))
    shared = run(lambda: group_logprobs(model, prompt, comps, 0.7, return_entropy=True))
    assert torch.equal(packed[1], shared[1])
    assert torch.allclose(packed[0], shared[0], atol=1e-5)
    assert torch.allclose(packed[2], shared[2], atol=1e-5)
    for a, b in zip(packed[3], shared[3], strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (a - b).abs().max()
    assert any(g.abs().sum() > 0 for g in shared[3])  # the gradient reached the adapter
