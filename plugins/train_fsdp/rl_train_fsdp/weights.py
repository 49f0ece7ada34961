"""The FSDP backend's weights going out: full HF-named tensors, the HF folder, this rank's state for tests (mixed into
:class:`rl_train_fsdp.engine.FSDPBackend`). LoRA: the adapters merged into the base model's names, and the PEFT adapter
folder (rl_lora)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import torch
from rl_core.checkpoints import copy_state
from rl_core.train_engine.hf_export import write_hf_folder, write_tokenizer

from rl_train_fsdp import sharding


class WeightExport:
    """:meth:`named_weights`, :meth:`save_hf` and :meth:`local_state_dict` over the backend's (sharded) model."""

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full HF-named tensors on every rank, one at a time (all ranks must drain it).

        Float32 for actor / critic (the master weights), the load dtype for
        ref. Sharded: each is a fresh all-gathered tensor; unsharded: a
        detached view of the parameter itself (no copy: copy it if you keep
        it past the next update). Tied weights are yielded once (HF
        checkpoint convention).
        """
        if self.lora:  # the base model's names and shapes, adapters merged (float32): what any rollout engine loads
            from rl_lora.adapters import iter_merged

            return iter_merged(self.model, sharding.full_tensor)
        return sharding.iter_full_weights(self.model)

    def save_hf(self, path: str) -> None:
        """An HF folder at ``path`` (rank 0 writes; every rank must call), the weights streamed shard by shard
        (rl_core.train_engine.hf_export: at most one shard held on the host). LoRA: a PEFT adapter folder
        (``peft.PeftModel.from_pretrained(base, path)``; its base is ``model.path``), and with
        ``trainer.save_merged_lora`` the merged weights in the model's dtype as an HF folder in ``path/merged``."""
        write = self.rank == 0
        folder, dtype = Path(path), None
        if self.lora:
            from rl_lora.adapters import MERGED_FOLDER, base_model_reference, write_adapter_folder

            write_adapter_folder(self.model, folder, sharding.full_tensor, write=write, base_model=base_model_reference(self.config.model.path))
            if write:
                write_tokenizer(folder, self.config)
            if not self.config.trainer.save_merged_lora:
                sharding.barrier()
                return
            folder, dtype = folder / MERGED_FOLDER, self.compute_dtype
        write_hf_folder(folder, self.named_weights(), self.hf_config, self.hf_class, getattr(self.model, "generation_config", None), self.config,
                        dtype=dtype, write=write)
        sharding.barrier()

    def local_state_dict(self) -> dict[str, Any]:
        """This rank's shards of the model and optimizer state, as plain tensors (copies).

        For tests and debugging: two engines with equal ``local_state_dict()``
        on every rank are in the same training state.
        """
        out: dict[str, Any] = {"model": {n: sharding.local_tensor(p.detach()).clone() for n, p in self.model.named_parameters()}}
        if self.optimizer is not None:
            out["optim"] = copy_state(self.optimizer.state_dict(), sharding.local_tensor)
        return out
