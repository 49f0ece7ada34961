"""tests/numerics.py, the suite's tolerances for comparisons across kernels (issue 55): its float64 AdamW reference is
torch's AdamW (fused or not, several steps, gradients at and below eps), its bounds catch a 1e-3 error, its messages
keep torch's numbers, and a bound too loose to mean anything is refused."""

from __future__ import annotations

import pytest
import torch

from tests.numerics import AdamWSteps, assert_adamw_steps, assert_fails, assert_reduction_close, perturbed, reduction_rtol


def test_reduction_bound_is_twice_gamma_n_and_refuses_a_meaningless_one():
    assert reduction_rtol(torch.float32, 1000) == pytest.approx(2 * 1000 * 2**-24, rel=1e-3)
    with pytest.raises(ValueError, match="too loose to tell a wrong result"):
        reduction_rtol(torch.bfloat16, 100)
    with pytest.raises(ValueError, match="terms=0"):
        reduction_rtol(torch.float32, 0)
    with pytest.raises(TypeError, match="not a floating-point dtype"):
        reduction_rtol(torch.int64, 10)


def test_a_sum_in_another_order_passes_and_a_1e_3_error_fails_with_torch_s_numbers():
    g = torch.Generator().manual_seed(0)
    terms = torch.randn(512, 64, generator=g) * 1e-2
    exact = terms.double().sum(0)
    forward, backward = terms.sum(0), terms.flip(0).cumsum(0)[-1]  # two orders of the same float32 sum
    assert_reduction_close(forward, backward, terms=512, name="sum")
    assert_reduction_close(forward.double(), exact, terms=512, name="sum", dtype=torch.float32)
    with pytest.raises(AssertionError, match=r"(?s)sum \(atol .*Greatest absolute difference: .*Greatest relative difference"):
        assert_reduction_close(perturbed(forward), backward, terms=512, name="sum")


@pytest.mark.parametrize("fused", [False, True])
def test_the_float64_adamw_reference_is_torch_s_adamw(fused):
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Linear(16, 8)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01, fused=fused)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))  # the lr changes from step to step
    with AdamWSteps(opt, model) as steps:
        for i in range(3):
            opt.zero_grad()
            model(torch.randn(4, 16, generator=g)).square().mean().backward()
            model.weight.grad[0, :4] = torch.tensor([0.0, 1e-9, -1e-8, 3e-8])  # at and below eps: AdamW's ill-conditioned entries
            opt.step()
            sched.step()
    assert len(steps.grads) == 3 and len(set(steps.lrs)) == 3
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    for name in after:
        assert_adamw_steps(after[name], initial[name], steps, name=name)
        assert_fails(assert_adamw_steps, perturbed(after[name], around=initial[name]), initial[name], steps, name=name)
