"""The Trainer's checkpoints, resume and final model: what a run keeps on disk, and what a failed write leaves."""

from __future__ import annotations

import json
import os
import shutil
import warnings

from rl_core.checkpoints.kept import kept_checkpoint
from rl_core.checkpoints.store import (
    RUN_CONFIG,
    CheckpointError,
    CheckpointManager,
    load_rng_state,
    model_weights_size,
    read_run_config,
    safe_load,
    save_rng_state,
    save_tensors,
)
from rl_core.placement.contract import WorkerMethod
from rl_core.trainer.outputs import changed_keys, check_previous_run, ensure_writable, free_bytes, plain_config, write_failure
from rl_core.util.stopping import is_failure, signal_name

TRAINER_STATE = "trainer_state.pt"


class Saving:
    """The :class:`~rl_core.trainer.loop.Trainer`'s side that writes and reads its output folder."""

    def _open_output_dir(self, resume_anyway: bool) -> None:
        """The output folder first: writable, not holding a checkpoint of another config, with room for hf_final
        (config.yaml itself is written by fit(), once everything was built)."""
        cfg = self.config
        ensure_writable(cfg.trainer.output_dir)
        self.ckpt = CheckpointManager(os.path.join(cfg.trainer.output_dir, "checkpoints"), keep_last=cfg.trainer.max_ckpt_to_keep)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # debris is reported when resuming
            latest = self.ckpt.latest()
        try:
            saved = read_run_config(latest[1]) if latest is not None else None  # the config inside the checkpoint
        except CheckpointError:  # damaged: the verified fallback (maybe_resume's) names it; compare against that one
            latest = self.ckpt.latest(verify=True)
            saved = read_run_config(latest[1]) if latest is not None else None
        self.config_diff = check_previous_run(
            cfg.trainer.output_dir, plain_config(cfg), has_checkpoint=latest is not None, resume=cfg.trainer.resume,
            resume_anyway=resume_anyway, saved_config=saved, saved_where=None if saved is None else os.path.join(latest[1], RUN_CONFIG),
            resumed_step=None if latest is None else latest[0],
            dropped_by=features.installed_hook("resume_drops") if (features := getattr(self.stack, "features", None)) is not None else None,
        )
        self._check_room_for_final()

    def save_checkpoint(self, step: int) -> str:
        """Write checkpoint ``step``; a full disk or a read-only folder is a clear error that leaves the last one intact."""
        needed = self.ckpt.size_of_latest() or getattr(self._disk_estimate(), "per_checkpoint", None)
        try:
            tmp = self.ckpt.begin(step)
            self.cluster.call(WorkerMethod.SAVE_CHECKPOINT, same_args=(tmp,))  # what trainer.save_contents names
            if "hf_model" in self.config.trainer.save_contents:
                self.cluster.call(WorkerMethod.SAVE_HF, same_args=(os.path.join(tmp, "hf"),))
            state = {
                "step": step,
                # split pools: the loader's position before the prompts of a batch not trained yet (rl_core.placement.rollout_pool)
                "data": (self.pipeline and self.pipeline.data_state()) or self.train_loader.state_dict(),
                "rng": save_rng_state(),
                "kl_coef": None if self.kl_ctrl is None else float(self.kl_ctrl.value),
            }
            save_tensors(state, os.path.join(tmp, TRAINER_STATE))
            with open(os.path.join(tmp, RUN_CONFIG), "w") as f:  # so a resume compares against it, config.yaml or not
                json.dump(plain_config(self.config), f, indent=1)
            return self.ckpt.commit(step)
        except BaseException as exc:
            self.ckpt.abort(step)  # no half-written temporary folder stays behind
            if not is_failure(exc):  # interrupted mid-save (a signal): that error, not a disk one
                raise
            previous = self.ckpt.latest()
            raise CheckpointError(
                f"could not write the checkpoint of step {step} under {self.ckpt.root}: "
                f"{write_failure(exc, getattr(exc, 'filename', None) or self.ckpt.root, needed)}. "
                + (f"The previous checkpoint, {previous[1]}, is intact and a rerun resumes from it." if previous else "No checkpoint was written yet.")
            ) from None

    def maybe_resume(self) -> int:
        for debris, size in self.ckpt.clean_debris():  # this run holds the folder's lock: nobody else is saving
            print(f"removed {debris} ({size} bytes), left by a save that did not finish", flush=True)
        if not self.config.trainer.resume:
            return 0
        latest = self.ckpt.latest(verify=True)
        if latest is None:
            return 0
        step, path = latest
        state = safe_load(os.path.join(path, TRAINER_STATE))  # before any engine reads the folder
        if not isinstance(state, dict) or not isinstance(state.get("data"), dict) or "rng" not in state:
            raise CheckpointError(f"{os.path.join(path, TRAINER_STATE)} is not an rl-core trainer state; delete {path} to resume from the previous checkpoint")
        contents = self._resume_contents(path)
        self.cluster.call(WorkerMethod.LOAD_CHECKPOINT, same_args=(path, contents, step))
        self.train_loader.load_state_dict(state["data"])
        load_rng_state(state["rng"])
        kl_changed = any(k.startswith("algorithm.kl_ctrl.") for k in changed_keys(self.config_diff))  # the new value wins
        if self.kl_ctrl is not None and state.get("kl_coef") is not None and not kl_changed:
            self.kl_ctrl.value = state["kl_coef"]
        if self.pipeline is None:
            self.cluster.call(WorkerMethod.SYNC_WEIGHTS)
        else:
            self.pipeline.sync(step)
        print(f"resumed from {path} (step {step})", flush=True)
        return step

    def _resume_contents(self, path: str) -> list[str]:
        """What a resume reads: trainer.load_contents (null: all) of what the checkpoint holds; a part asked for and missing,
        or left out, is said once (AdamW then starts fresh; the LR schedule is put at the resumed step)."""
        saved = set(((read_run_config(path) or {}).get("trainer") or {}).get("save_contents") or ("model", "optimizer", "extra"))
        asked = saved if self.config.trainer.load_contents is None else set(self.config.trainer.load_contents)
        for part, fresh in (("optimizer", "AdamW starts from a fresh state"), ("extra", "the LR schedule is put at the resumed step")):
            if part not in asked or part not in saved:
                why = "trainer.load_contents leaves it out" if part not in asked else "the checkpoint does not hold it (trainer.save_contents)"
                print(f"resuming without the checkpoint's {part} ({why}): {fresh}", flush=True)
        return sorted((asked & saved) - {"hf_model"})

    def interrupted_text(self, signum: int) -> str:
        """What a signal that stopped the run at once kept, and how to keep more next time."""
        where = f"during step {self.step + 1}" if self.step < self.total_steps else "while writing the final model"
        latest = self.ckpt.latest()
        if latest is not None:
            return (f"stopped by {signal_name(signum)} {where}: the last checkpoint is {kept_checkpoint(latest[1], self.config.trainer.output_dir)} "
                    f"(step {latest[0]}); run the same command to resume from it")
        return (
            f"stopped by {signal_name(signum)} {where}: nothing was saved (no checkpoint yet), so a rerun starts over. "
            "A single Ctrl-C / SIGTERM during training lets the step finish and saves a checkpoint; "
            "set trainer.save_freq=N to also save one every N steps"
        )

    def _save_final(self) -> None:
        """``hf_final``, written beside it first and renamed into place: a failed write leaves no half folder."""
        out = self.config.trainer.output_dir
        path, partial = os.path.join(out, "hf_final"), os.path.join(out, ".hf_final.partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            self.cluster.call(WorkerMethod.SAVE_HF, same_args=(partial,))
            if os.path.exists(path):
                old = os.path.join(out, ".hf_final.old")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(path, old)
                os.replace(partial, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(partial, path)
        except BaseException as exc:  # a worker's failure arrives as a WorkerError / torch error
            shutil.rmtree(partial, ignore_errors=True)  # no half folder, whatever stopped the write
            if not is_failure(exc):  # a signal: that error, not a disk one
                raise
            why = write_failure(exc, path, self.final_size)
            latest = self.ckpt.latest()
            if latest is not None and latest[0] == self.step:
                kept = f"the checkpoint of the last step, {latest[1]}, is intact: a rerun resumes from it and writes hf_final again"
            else:
                kept = self._keep_state_after_failed_final()
            raise CheckpointError(f"could not write the final model to {path}: {why}. {kept}") from None

    def _kept_after_failure(self, step: int) -> str:
        """What a run stopped by a write failure after ``step`` keeps: its last checkpoint, or one saved now if it has none."""
        latest = self.ckpt.latest()
        if latest is not None:
            return f"The last checkpoint, {latest[1]} (step {latest[0]}), is intact: after freeing space, a rerun resumes from it."
        try:
            saved = self.save_checkpoint(step)
        except CheckpointError as exc:
            return f"There was no checkpoint yet and saving one of step {step} failed too ({exc}): a rerun starts over."
        return f"There was no checkpoint yet, so step {step} was saved as {saved}: after freeing space, a rerun resumes from it."

    def _keep_state_after_failed_final(self) -> str:
        """hf_final failed and the last step has no checkpoint: try to save one (the partial folder's room is free again)."""
        try:
            saved = self.save_checkpoint(self.step)
        except CheckpointError as exc:
            return f"Saving a checkpoint of step {self.step} instead failed too ({exc}); the trained weights are lost"
        return f"The run's state was saved instead as {saved}: after freeing space, a rerun resumes from it and writes hf_final"

    def _disk_estimate(self):
        """rl-memory-estimate's disk estimate of this run (its hook ``disk_estimate``; None without it or when the
        model's shape is unknown), computed once."""
        if not hasattr(self, "_disk"):
            features = self.stack.features
            estimate = features.installed_hook("disk_estimate") if features is not None else None
            try:
                self._disk = estimate(self.config, features=features) if estimate is not None else None
            except (OSError, ValueError, KeyError, TypeError, AttributeError):  # advisory only
                self._disk = None
        return self._disk

    @property
    def final_size(self) -> int | None:
        """Bytes hf_final will take (rl-memory-estimate's disk estimate, else the model folder's weight files; None if unknown)."""
        est = self._disk_estimate()
        return est.final_model if est is not None else model_weights_size(self.config.model.path)

    def _check_room_for_final(self) -> None:
        """With no checkpoints (save_freq <= 0) everything rides on hf_final: refuse to start without room for it."""
        if self.config.trainer.save_freq > 0:
            return
        needed, free = self.final_size, free_bytes(self.config.trainer.output_dir)
        if needed and free is not None and free < needed * 1.1:
            raise CheckpointError(
                f"trainer.save_freq={self.config.trainer.save_freq} saves nothing until the final model, which needs about "
                f"{needed / 2**30:.2f} GiB, but the disk holding trainer.output_dir={self.config.trainer.output_dir!r} has "
                f"{free / 2**30:.2f} GiB free: the whole run would be lost at the end. Free space, choose another "
                "trainer.output_dir, or save checkpoints as you go (trainer.save_freq=N)"
            )
