"""Tolerances for comparing two correct float computations that may use other kernels (issue 55).

A compiled (inductor) model and the eager one, or the same eager model on two CPUs (AVX2, AVX-512, AMX; oneMKL and
oneDNN pick their kernels per CPU), sum the same terms in another order, with other blocking, with or without FMA.
Both are correct; they differ by rounding. A fixed ``rtol=1e-5, atol=1e-6`` holds for the kernels one CPU family picks
and fails on another (``test_lora_inside_compiled_decoder_layers_gives_the_same_update`` on an Intel CPU with AMX).
The bounds here come from the dtype and the size of the reduction instead:

- **A reduction of n terms** (a matmul's inner dimension, a sum over tokens): any evaluation order, blocking or FMA
  use gives the exact sum within ``gamma_n * sum|terms|``, ``gamma_n = n*u / (1 - n*u)``, ``u`` the dtype's unit
  roundoff (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 3.4 / §4.2). Two evaluations
  differ by at most twice that: :func:`reduction_atol`. For a chain of reductions (a network's forward and backward)
  ``n`` is the sum of the chain's lengths, to first order (errors add). ``sum|terms|`` is not known from the result
  alone (an entry can be a sum that cancels: 5e-7 out of terms of 1e-2); the tensor's largest absolute entry stands
  for it (the size of the terms each entry sums), so entries that cancel get the absolute bound of the large ones.
  That stand-in is an estimate, not a proof; the worst-case ``gamma_n`` (errors do not all align: typical ones grow
  like ``sqrt(n) * u``) leaves the margin: on the AMX CPU the compiled LoRA gradients sat 300x inside it.
- **AdamW's first step** moves each entry by ``lr * g / (|g| + eps)``: by about ``lr`` whatever the gradient's size.
  An entry whose gradient is within rounding of 0 moves by an amount rounding decides (seen on the AMX CPU: 1.1e-6
  apart with lr 1e-2 between compiled and eager, from gradients 3e-9 apart), and later steps start from there. So
  updates are not compared with each other: the first step's gradients are (:func:`assert_reduction_close`), and each
  side's weights after its steps are compared with torch AdamW's steps of its own gradients computed in float64
  (:func:`assert_adamw_steps`; :class:`AdamWSteps` records them), within the rounding of the weights' dtype.
  Together: the same gradient, and the update that gradient gives.

The bounds stay below a wrong result: float32 with n up to 8000 gives ``2 * gamma_n`` < 1e-3, and every test using
them also checks that a result off by 1e-3 (relative; :func:`perturbed`) fails (:func:`assert_fails`).
``bash .ci/kernels.sh avx2 default`` runs the numerics-heavy tests under other CPU kernel choices on one machine.

Failure messages keep torch's own numbers (mismatched elements, greatest absolute and relative difference) and add
the tensor's name and the bound's origin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

WRONG_BY = 1e-3  # the relative error a test's perturbed negative case carries: every bound here must catch it


def unit_roundoff(dtype: torch.dtype) -> float:
    """u: half the distance from 1.0 to the next float of ``dtype`` (float32: 2**-24, bfloat16: 2**-8)."""
    if not dtype.is_floating_point:
        raise TypeError(f"unit_roundoff: {dtype} is not a floating-point dtype; pass the dtype the values were computed in")
    return torch.finfo(dtype).eps / 2


def reduction_rtol(dtype: torch.dtype, terms: int) -> float:
    """How far apart (relative to ``sum|terms|``) two correct evaluations of a sum of ``terms`` products can be:
    ``2 * gamma_n``. Refuses an ``n`` whose bound is not small (``n*u >= 0.01``): such a comparison cannot tell a
    right result from a wrong one, so compare in a wider dtype or against a float64 reference instead."""
    if terms < 1:
        raise ValueError(f"reduction_rtol: terms={terms}; pass the reduction's length (>= 1), e.g. the number of tokens summed")
    nu = terms * unit_roundoff(dtype)
    if nu >= 0.01:
        raise ValueError(
            f"reduction_rtol: {terms} terms in {dtype} give a bound of {2 * nu:.2g} (n*u >= 0.01): too loose to tell a wrong "
            "result from a right one; compare in float32 / float64 or against a float64 reference"
        )
    return 2 * nu / (1 - nu)


def reduction_atol(expected: torch.Tensor, terms: int, dtype: torch.dtype | None = None) -> float:
    """Absolute bound for ``expected`` (a tensor of sums of ``terms`` products each, computed in ``dtype``, by default
    its own): ``reduction_rtol`` times its largest absolute entry (standing for ``sum|terms|``, module docstring)."""
    dtype = dtype or expected.dtype
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    return reduction_rtol(dtype, terms) * scale


def lm_gradient_terms(config: Any, tensors: dict[str, torch.Tensor]) -> int:
    """The reduction length for a decoder LM's loss, logits and weight gradients on a batch (``tensors``: its
    ``input_ids`` and ``attention_mask``), to first order the sum of the chain of sums from the loss back to a weight:
    the tokens (the loss's mean, a weight gradient's sum over tokens), the vocab twice (softmax, lm_head backward),
    then per layer the hidden size twice (projections in and out), the MLP width and the sequence (attention)."""
    tokens = int(tensors["attention_mask"].sum())
    per_layer = 2 * config.hidden_size + config.intermediate_size + tensors["input_ids"].shape[1]
    return tokens + 2 * config.vocab_size + config.num_hidden_layers * per_layer


def assert_close(actual: Any, expected: Any, *, name: str, why: str = "", **kwargs: Any) -> None:
    """``torch.testing.assert_close`` whose message starts with ``name`` (and ``why``: where the tolerance comes from)
    and keeps torch's own numbers: mismatched elements, greatest absolute and relative difference."""
    head = f"{name} ({why})" if why else name
    torch.testing.assert_close(actual, expected, msg=lambda m: f"{head}: {m}", **kwargs)


def assert_reduction_close(
    actual: torch.Tensor, expected: torch.Tensor, *, terms: int, name: str, dtype: torch.dtype | None = None
) -> None:
    """``actual`` equals ``expected`` up to the rounding two correct evaluations of ``terms``-term sums in ``dtype``
    can differ by (:func:`reduction_atol`, ``rtol=0``: entries that cancel get the bound of the large ones)."""
    dtype = dtype or expected.dtype
    atol = reduction_atol(expected, terms, dtype)
    why = f"atol {atol:.3g} = 2*gamma_{terms}({dtype}) * max|expected| {float(expected.detach().abs().max()):.3g}"
    assert_close(actual, expected, name=name, why=why, atol=atol, rtol=0.0)


class AdamWSteps:
    """Records what a torch AdamW applies at each of its steps: every named parameter's gradient (after clipping: an
    optimizer pre-step hook) and the group's lr (a schedule may change it). ``with AdamWSteps(optimizer, model):``."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module):
        if len(optimizer.param_groups) != 1:
            raise ValueError(f"AdamWSteps: {len(optimizer.param_groups)} param groups; it models one (an engine's build_adamw)")
        self.optimizer, self.group = optimizer, optimizer.param_groups[0]
        self.names = {p: n for n, p in model.named_parameters() if p.requires_grad}
        self.grads: list[dict[str, torch.Tensor]] = []
        self.lrs: list[float] = []

    def _seen(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.grads.append({self.names[p]: p.grad.detach().clone() for p in self.group["params"] if p.grad is not None})
        self.lrs.append(float(self.group["lr"]))

    def __enter__(self) -> AdamWSteps:
        self._handle = self.optimizer.register_step_pre_hook(self._seen)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handle.remove()

    def hyper(self) -> dict:
        """The group's settings but its params and lr (equal between two runs that should agree)."""
        return {k: v for k, v in self.group.items() if k not in ("params", "lr", "initial_lr")}


def adamw_reference(initial: torch.Tensor, steps: AdamWSteps, name: str) -> torch.Tensor:
    """Weights after torch's AdamW steps from ``initial`` with the gradients and lrs ``steps`` recorded, in float64:
    ``p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g**2;
    p -= lr/(1-b1**t) * m / (sqrt(v)/sqrt(1-b2**t) + eps)``. A step where the parameter had no gradient is skipped."""
    group = steps.group
    if group.get("amsgrad") or group.get("maximize"):
        raise ValueError("adamw_reference: amsgrad / maximize are not modelled; compare such runs another way")
    (b1, b2), wd, eps = group["betas"], float(group["weight_decay"]), float(group["eps"])
    p = initial.detach().to(torch.float64).clone()
    m, v, t = torch.zeros_like(p), torch.zeros_like(p), 0
    for grads, lr in zip(steps.grads, steps.lrs):
        if name not in grads:
            continue
        g, t = grads[name].to(torch.float64), t + 1
        p *= 1 - lr * wd
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p -= lr / (1 - b1**t) * m / (v.sqrt() / (1 - b2**t) ** 0.5 + eps)
    return p


def assert_adamw_steps(after: torch.Tensor, initial: torch.Tensor, steps: AdamWSteps, *, name: str) -> None:
    """``after`` is AdamW's steps from ``initial`` with the recorded gradients (:func:`adamw_reference`, float64),
    within the rounding of ``after``'s dtype: per step a few ``u`` of the weight (decay, subtraction) and of the step
    ``lr`` (moments, sqrt, quotient, bias corrections): ``rtol = 8u * steps``, ``atol = 8u * sum(lr)``."""
    if not steps.grads:
        raise AssertionError(f"{name}: no AdamW step was recorded; run the update inside `with AdamWSteps(...)`")
    want = adamw_reference(initial, steps, name)
    u, n = unit_roundoff(after.dtype), len(steps.grads)
    rtol, atol = 8 * u * n, 8 * u * sum(steps.lrs)
    why = f"torch AdamW's {n} step(s) of its own gradients in float64, rtol 8u*{n} = {rtol:.3g}, atol 8u*sum(lr) = {atol:.3g}"
    assert_close(after.detach().to(torch.float64), want, name=name, why=why, rtol=rtol, atol=atol)


def perturbed(t: torch.Tensor, by: float = WRONG_BY, *, around: torch.Tensor | None = None) -> torch.Tensor:
    """``t`` made wrong by ``by`` (relative): ``t * (1 + by)``, or, with ``around`` (the weights before an update),
    the update ``t - around`` made ``by`` too large."""
    return t * (1 + by) if around is None else t + by * (t - around)


def assert_fails(check: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """The negative case: ``check(*args, **kwargs)`` (given a deliberately wrong result) raises AssertionError."""
    try:
        check(*args, **kwargs)
    except AssertionError:
        return
    what = getattr(check, "__name__", check)
    raise AssertionError(f"{what} accepted a result perturbed by {WRONG_BY:g}: its bound is too loose to tell a wrong result from a right one")
