"""Training steps with pipeline stages through megatron-core's own schedule (mixed into
:class:`rl_train_megatron.engine.MegatronBackend`).

With ``train.pipeline_model_parallel_size`` > 1 the core update loop hands the backend a whole mini-batch
(:func:`rl_core.train_engine.update.mini_batch_step`: ``runs_micro_batches`` / ``run_micro_batches``) and the backend
runs it through ``megatron.core.pipeline_parallel.get_forward_backward_func()`` (1F1B: stage p runs PP - p - 1 warm-up
forwards, then one forward and one backward in turn, so the stages work at the same time), with rl-core's loss
function on the last stage: the loop's ``loss_of(x, rows, real, heads)`` gives each micro-batch's loss and weight (its
token share; float16's loss scale) and records the metrics, as in the one-micro-batch-at-a-time loop. megatron-core is
told ``calculate_per_token_loss`` so it does not divide the loss by the micro-batch count (the weight already is the
share), ``variable_seq_lengths`` so micro-batches of different rows / columns exchange their shapes first, and float32
hidden states between stages (as :mod:`rl_train_megatron.pipeline` sends).

Virtual stages: the code for megatron-core's interleaved schedule (``forward_backward_pipelining_with_interleaving``, the
model chunks and one iterator over the micro-batches per chunk, M a multiple of PP) is here but off
(``CorePipeline.interleaved``): on gloo, PP 2 x VPP 2 with micro-batches of different shapes
(``variable_seq_lengths``), both ranks hung (400 s, test_megatron_core_pipeline's virtual-stage run); not debugged in
issue 49's time. Virtual stages run the reference loop and are refused on GPUs (``rlcore check``).

What still runs the reference loop (:mod:`rl_train_megatron.pipeline`, :meth:`core_pipeline_problem` says why): MoE models (the routers'
aux-loss scale per micro-batch), context / sequence / expert parallelism, routing replay and ``fully_shard`` (their
per-forward steps live in :meth:`rl_train_megatron.schedule.Schedule._forward`), and the forward-only passes (log-probs,
values: one forward each, nothing to overlap with a backward).
"""

from __future__ import annotations

import contextlib

import torch
from rl_core.train_engine.backend import Heads

from rl_train_megatron import cpu_shims
from rl_train_megatron import model as mmodel

#: TransformerConfig fields the schedule reads, set for the time of one mini-batch
_SCHEDULE_FIELDS = {"variable_seq_lengths": True, "calculate_per_token_loss": True, "pipeline_dtype": torch.float32,
                    "deallocate_pipeline_outputs": False, "finalize_model_grads_func": None, "grad_scale_func": None,
                    "no_sync_func": None, "grad_sync_func": None, "param_sync_func": None, "timers": None}


class CorePipeline:
    #: False: every step through the reference loop (the tests' comparison, bench/megatron_pipeline_cpu.py)
    core_pipeline = True
    #: virtual stages through megatron-core's interleaved schedule: off (it hung on gloo, PP 2 x VPP 2, micro-batches of
    #: different shapes; not debugged: core_pipeline_problem sends virtual stages to the reference loop)
    interleaved = False

    def core_pipeline_problem(self) -> str | None:
        """Why this backend's training steps do not go through megatron-core's schedule (None: they do)."""
        if self.topo.pp == 1:
            return "no pipeline stages (PP 1: the forward / backward of each micro-batch, no schedule needed)"
        if not self.core_pipeline:
            return "the reference loop was asked for (MegatronBackend.core_pipeline = False)"
        why = [what for what, on in (("virtual stages", self.vpp > 1), ("an MoE model", self.shape.moe), ("context parallelism", self.topo.cp > 1),
                                     ("sequence parallelism", self.sp), ("expert parallelism", self.topo.ep > 1),
                                     ("routing replay", self.router_replay is not None), ("train.options.fully_shard", self.stage is not None)) if on]
        return ", ".join(why) + ": the reference loop (rl_train_megatron.pipeline)" if why else None

    def runs_micro_batches(self) -> bool:
        return self.core_pipeline_problem() is None

    def _autocast(self):
        if self.autocast_dtype is not None:
            return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)
        return contextlib.nullcontext()

    def run_micro_batches(self, items, loss_of, *, temperature: float, with_entropy: bool, entropy_grad: bool) -> None:
        """The mini-batch's micro-batches ``(x, rows, real)`` through megatron-core's 1F1B schedule; ``loss_of(x, rows,
        real, heads) -> (loss, weight)`` on the last stage (gradients accumulate as the loop's ``backward`` would)."""
        from megatron.core.pipeline_parallel import get_forward_backward_func, schedules

        items = list(items)
        heads_kw = {"temperature": temperature, "with_entropy": with_entropy, "entropy_grad": entropy_grad}
        pp, m = self.topo.pp, len(items)
        if self.vpp > 1 and (not self.interleaved or m < pp or m % pp):  # the interleaved schedule takes groups of PP micro-batches
            return self._reference_run(items, loss_of, heads_kw)
        cpu_shims.install_schedule(self.device)  # (nothing unless the device is the CPU)
        configs = [c.config for c in self.chunks]
        saved = [{k: getattr(config, k) for k in _SCHEDULE_FIELDS} for config in configs]
        critic = self.role == "critic"

        def forward_step(data_iterator, model):
            x, rows, real = next(data_iterator)
            y, cut = (x, 0) if critic else self._trim(x, x["responses"].shape[1])
            with self._autocast():
                h_in = None if model.pre_process else model.decoder.input_tensor  # (set by the schedule from the previous stage)
                h = mmodel.stage_hidden(model, y["input_ids"], y["attention_mask"], y["position_ids"], h_in)
            if not model.post_process:
                return h.float(), None

            def loss_func(out: torch.Tensor):
                R = x["responses"].shape[1]
                with self._autocast():
                    if critic:
                        heads = Heads(values=mmodel.values(model, out[-R - 1 : -1]))
                    else:
                        lp, ent = self._log_probs_head(out, y, temperature, with_entropy, entropy_grad, cut)
                        heads = Heads(log_probs=lp, entropy=ent)
                    loss, weight = loss_of(x, rows, real, heads)
                one = torch.ones((), dtype=torch.int, device=out.device)
                return loss * weight, one, {}

            return h, loss_func

        b, s = items[0][0]["input_ids"].shape  # (variable_seq_lengths: each micro-batch's shape is exchanged)
        self.core_schedule_runs = getattr(self, "core_schedule_runs", 0) + 1  # (the tests' view)
        try:
            for config in configs:
                for k, v in _SCHEDULE_FIELDS.items():
                    setattr(config, k, v)
            if self.vpp > 1:  # (parallel_state knows no virtual size: the engine builds the chunks itself)
                run, data = schedules.forward_backward_pipelining_with_interleaving, [iter(items) for _ in self.chunks]
                for config in configs:
                    config.microbatch_group_size_per_vp_stage = pp
            else:
                run, data = get_forward_backward_func(), iter(items)
            self.core_schedule_name = run.__name__
            run(forward_step_func=forward_step, data_iterator=data, model=list(self.chunks), num_microbatches=m, seq_length=s,
                micro_batch_size=b, forward_only=False)
        finally:
            for config, old in zip(configs, saved):
                for k, v in old.items():
                    setattr(config, k, v)

    def _reference_run(self, items, loss_of, heads_kw) -> None:
        """The update loop's per-micro-batch forward / backward (rl_train_megatron.pipeline's loop)."""
        for x, rows, real in items:
            with self._autocast():
                heads = self.forward(x, training=True, **heads_kw)
                loss, weight = loss_of(x, rows, real, heads)
            self.backward(loss, weight)
