"""The Megatron backend's checkpoints (mixed into :class:`rl_train_megatron.engine.MegatronBackend`): per rank
``rank{r}.pt`` (plain tensors and numbers: loads with ``weights_only=True``) and ``megatron.json``, the layout
(role, TP, PP, DP, ...) a resume must match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from rl_core.checkpoints import copy_state, load_rng_state, safe_load, save_rng_state, save_tensors
from rl_core.problems import UserError
from rl_offload import offload

from rl_train_megatron import fully_sharded, parallel

MANIFEST = "megatron.json"


class CheckpointMismatchError(UserError, RuntimeError):
    """A checkpoint written with another role or parallel layout."""


class Checkpoints:
    """:meth:`save_checkpoint`, :meth:`load_checkpoint` and :meth:`local_state_dict` over the backend's model and AdamW."""

    def _layout(self) -> dict[str, Any]:
        t = self.topo
        out = {"role": self.role, "tp": t.tp, "pp": t.pp, "dp": t.dp, "world": t.world, **({"cp": t.cp} if t.cp > 1 else {})}
        if self.shape.moe:
            out.update(ep=t.ep, etp=t.etp)
        if self.zero is not None:
            out["distributed_optimizer"] = True
        if getattr(self, "native_optimizer", None) is not None:  # AdamW state of megatron-core's bucket shards: another layout than ZeRO-1's
            out["distributed_optimizer"] = "megatron-core"
        if self.stage is not None:
            out["fully_shard"] = True
        if self.shape.stages and len(set(self.shape.stages)) > 1:  # uneven pipeline stages
            out["stages"] = list(self.shape.stages)
        if self.vpp > 1:
            out["vpp"] = self.vpp
        return out

    def save_checkpoint(self, path: str, scheduler: dict[str, Any] | None) -> None:
        """Per rank ``path/rank{r}.pt`` (plain tensors and numbers: loads with ``weights_only=True``) + ``megatron.json``.

        Each file holds this rank's parameter shards, its AdamW state, the LR
        scheduler's counters and the RNG state; ``megatron.json`` the layout
        (role, TP, PP, DP) that :meth:`load_checkpoint` checks.
        """
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        state = self.local_state_dict()
        if self.optimizer is not None:
            state["scheduler"] = scheduler
        state["rng"] = save_rng_state()
        save_tensors(state, str(root / f"rank{self.rank}.pt"))
        if self.rank == 0:
            (root / MANIFEST).write_text(json.dumps(self._layout(), indent=1))
        parallel.barrier()

    def load_checkpoint(self, path: str) -> dict[str, Any] | None:
        """Restore what :meth:`save_checkpoint` wrote (same role and layout; bit-identical); the scheduler state."""
        root = Path(path)
        if not (root / MANIFEST).is_file():
            raise FileNotFoundError(f"{self.role}: no Megatron checkpoint at {str(root)!r} (expected {MANIFEST} written by save_checkpoint)")
        saved = json.loads((root / MANIFEST).read_text())
        if saved != self._layout():
            raise CheckpointMismatchError(
                f"{self.role}: the checkpoint at {str(root)!r} was written with {saved}, this run has {self._layout()}; "
                "resume with the same train.tensor_model_parallel_size, pipeline size and number of processes"
            )
        state = safe_load(str(root / f"rank{self.rank}.pt"))
        saved_model = state.get("model") if isinstance(state, dict) else None
        params = dict(self.model.named_parameters())
        if not isinstance(saved_model, dict):
            raise CheckpointMismatchError(f"{self.role}: {root / f'rank{self.rank}.pt'} holds no model shards; the checkpoint is damaged")
        wrong = [n for n, p in params.items()
                 if not isinstance(saved_model.get(n), torch.Tensor) or saved_model[n].shape != fully_sharded.local(p).shape]
        if wrong:
            raise CheckpointMismatchError(
                f"{self.role}: the checkpoint at {str(root)!r} does not fit this model (missing or other shape: {wrong[:5]}); "
                "it was written for another model (model.path, its shape); resume with the config it was written under"
            )
        if self.stage is not None:  # this rank's shards of the parameters and of the AdamW state
            fully_sharded.load_local_state(self.model, self.optimizer, state)
            load_rng_state(state["rng"])
            parallel.barrier()
            return state.get("scheduler")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(saved_model[name])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optim"])  # the state follows its parameters' device
            if self.optimizer_offload or self.optimizer_cpu_offload:
                offload.move_optimizer_state(self.optimizer, torch.device("cpu"))
        load_rng_state(state["rng"])
        parallel.barrier()
        return state.get("scheduler")

    def local_state_dict(self) -> dict[str, Any]:
        """This rank's parameter shards and AdamW state (copies, plain data)."""
        if self.stage is not None:
            return fully_sharded.local_state(self.model, self.optimizer)
        out: dict[str, Any] = {"model": {n: p.detach().clone() for n, p in self.model.named_parameters()}}
        if self.optimizer is not None:
            out["optim"] = copy_state(self.optimizer.state_dict())
        return out
