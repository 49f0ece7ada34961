"""The fsdp engine's checkpoint holds tensors (DCP) + JSON only, loads without unpickling anything, and
re-applies the run's optimizer config on resume (issue 27, items 1 and 3)."""

from __future__ import annotations

import dataclasses
import json
import pickle

import attrs
import pytest
import torch
from rl_core.backends import WorkerContext
from rl_core.checkpoints.store import CheckpointError
from rl_train_fsdp.dcp_io import PLAIN_FILE, read_dcp_metadata
from rl_core_testing.train_conformance import default_config, make_step_batch, single_rank_order
from rl_train_fsdp.engine import build_engine

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("one_thread")]


class _WritesMarker:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny_model_dir):
    """An actor checkpoint after one update (lr 1e-3, betas (0.9, 0.999), weight decay 0.01, cosine schedule)."""
    root = tmp_path_factory.mktemp("fsdp_ckpt")
    model_dir = tiny_model_dir("qwen2")
    shard = single_rank_order(make_step_batch(model_dir), 2, 2)
    a = build_engine("actor", default_config(model_dir), WorkerContext())
    a.update(shard)
    a.save_checkpoint(str(root / "ck"))
    return model_dir, root / "ck", shard, a.local_state_dict()


def _optim_cfg(model_dir, **optim):
    cfg = default_config(model_dir)
    return attrs.evolve(cfg, actor=attrs.evolve(cfg.actor, optim=attrs.evolve(cfg.actor.optim, **optim)))


def test_checkpoint_holds_tensors_and_json_only(saved):
    _, ck, _, _ = saved
    md = read_dcp_metadata(str(ck / "dcp" / ".metadata"))
    kinds = {type(v).__name__ for v in md.state_dict_metadata.values()}
    assert kinds == {"TensorStorageMetadata"}, kinds  # no pickled values in the DCP folder
    plain = json.loads((ck / PLAIN_FILE).read_text())
    assert plain["param_groups"][0]["lr"] > 0 and plain["param_groups"][0]["betas"] == {"__tuple__": [0.9, 0.999]}


def test_resume_applies_the_new_optimizer_config(saved):
    model_dir, ck, shard, state = saved
    b = build_engine("actor", _optim_cfg(model_dir, lr=0.5, betas=[0.8, 0.95], weight_decay=0.2, eps=1e-6), WorkerContext())
    b.load_checkpoint(str(ck))
    loaded = b.local_state_dict()
    for pid, st in state["optim"]["state"].items():  # the moments and step counts are the checkpoint's
        for key, t in st.items():
            assert torch.equal(loaded["optim"]["state"][pid][key], t), (pid, key)
    group = b.optimizer.param_groups[0]
    assert (group["betas"], group["weight_decay"], group["eps"]) == ((0.8, 0.95), 0.2, 1e-6)
    assert b.scheduler.base_lrs == [0.5] and b.scheduler.last_epoch == 1
    assert group["lr"] == pytest.approx(0.5 * b._schedule(1))  # the schedule continues from step 1 at the new peak
    assert b.update(shard)["lr"] == pytest.approx(0.5 * b._schedule(1))


def test_unchanged_config_resumes_at_the_saved_lr(saved):
    model_dir, ck, _, state = saved
    b = build_engine("actor", default_config(model_dir), WorkerContext())
    b.load_checkpoint(str(ck))
    assert b.optimizer.param_groups[0]["lr"] == json.loads((ck / PLAIN_FILE).read_text())["param_groups"][0]["lr"]
    assert b.local_state_dict()["scheduler"] == state["scheduler"]


def test_old_format_checkpoint_with_pickled_values_loads_without_unpickling_them(saved, tmp_path):
    """What an older rl-core wrote (hyper-parameters as pickled bytes inside __0_0.distcp), planted: the tensors load, the bytes are never read."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_dir, ck, _, state = saved
    marker = tmp_path / "PWNED"
    src = build_engine("actor", default_config(model_dir), WorkerContext())
    src.load_checkpoint(str(ck))
    model_sd, optim_sd = get_state_dict(src.model, src.optimizer)
    optim_sd["param_groups"][0]["lr"] = _WritesMarker(str(marker))  # route (b) of issue 27
    old = tmp_path / "old"
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(old / "dcp"))
    torch.save(torch.load(ck / "extra_rank0.pt", weights_only=True), old / "extra_rank0.pt")
    assert "BytesStorageMetadata" in {type(v).__name__ for v in read_dcp_metadata(str(old / "dcp" / ".metadata")).state_dict_metadata.values()}
    b = build_engine("actor", default_config(model_dir), WorkerContext())
    b.load_checkpoint(str(old))
    assert not marker.exists()
    for name, t in state["model"].items():
        assert torch.equal(b.local_state_dict()["model"][name], t), name
    with pytest.raises(pickle.UnpicklingError):  # the planted value really is a pickle of a call, refused by a safe reader
        torch.load(_planted_bytes(old), weights_only=True)
    assert not marker.exists()


def _planted_bytes(dcp_root):
    """The pickled bytes of the first non-tensor entry of an old-format DCP folder, as a file-like."""
    import io

    md = read_dcp_metadata(str(dcp_root / "dcp" / ".metadata"))
    for index, info in md.storage_data.items():
        if type(md.state_dict_metadata[index.fqn]).__name__ == "BytesStorageMetadata":
            data = (dcp_root / "dcp" / info.relative_path).read_bytes()[info.offset : info.offset + info.length]
            return io.BytesIO(data)
    raise AssertionError("no bytes entry")


def test_tensor_entry_pointing_at_a_pickle_payload_is_refused(saved, tmp_path):
    """A forged .metadata whose tensor entry points at a planted pickle: torch's weights_only reader refuses it, named."""
    import shutil

    model_dir, ck, _, _ = saved
    marker = tmp_path / "PWNED"
    forged = tmp_path / "forged"
    shutil.copytree(ck, forged)
    distcp = forged / "dcp" / "__0_0.distcp"
    payload = pickle.dumps(_WritesMarker(str(marker)))
    offset = distcp.stat().st_size
    with open(distcp, "ab") as f:
        f.write(payload)
    md = read_dcp_metadata(str(forged / "dcp" / ".metadata"))
    key = next(k for k in md.storage_data if k.fqn.startswith("model."))
    md.storage_data[key] = dataclasses.replace(md.storage_data[key], offset=offset, length=len(payload))
    with open(forged / "dcp" / ".metadata", "wb") as f:
        pickle.dump(md, f)
    b = build_engine("actor", default_config(model_dir), WorkerContext())
    with pytest.raises(CheckpointError, match="cannot load the checkpoint"):
        b.load_checkpoint(str(forged))
    assert not marker.exists()


def test_model_of_another_shape_is_a_clear_error(saved, tiny_model_dir):
    model_dir, ck, _, _ = saved
    other = tiny_model_dir("llama")
    b = build_engine("actor", default_config(other), WorkerContext())
    with pytest.raises(CheckpointError, match="written for another model"):
        b.load_checkpoint(str(ck))
