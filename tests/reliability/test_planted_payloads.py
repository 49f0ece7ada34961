"""No code from a checkpoint folder, by any route (issue 27, item 1).

Every file a resume reads is planted with a payload that writes a marker file
when it runs; the marker must never appear. Two cases go through a plain
``rlcore train`` resume (the issue's routes a and b), the rest call the loaders
a resume uses directly (fast). ``test_every_file_a_resume_reads_is_planted``
keeps the table complete as the checkpoint format grows.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil

import pytest
import torch
import yaml
from rl_core.checkpoints.store import (
    MARKER,
    CheckpointError,
    CheckpointManager,
    file_digest,
    read_json,
    read_run_config,
    safe_load,
)
from rl_core.trainer.outputs import OutputDirError, read_previous_config
from rl_train_fsdp.dcp_io import read_dcp_metadata, read_plain

from tests.reliability import tally
from tests.reliability.evil import WritesMarker, payload
from tests.reliability.runs import cli, copy_run, read_metrics

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

STEP2 = ("out", "checkpoints", "global_step_2")


def _forge_manifest(step_dir):
    """What an attacker who copies a whole folder can do: make the manifest match the planted files."""
    man = json.loads((step_dir / MARKER).read_text())
    man["files"] = sorted(str(p.relative_to(step_dir)) for p in step_dir.rglob("*") if p.is_file() and p.name != MARKER)
    man["digests"] = {name: file_digest(str(step_dir / name)) for name in man["files"]}
    (step_dir / MARKER).write_text(json.dumps(man))


def _op(opcode: bytes, text: str) -> bytes:
    data = text.encode()
    return opcode + bytes([len(data)]) + data


def global_call_pickle(module: str, name: str, arg: str) -> bytes:
    """A protocol-4 pickle that resolves ``module.name`` (dotted names allowed) and calls it with ``arg``."""
    return b"\x80\x04" + _op(b"\x8c", module) + _op(b"\x8c", name) + b"\x93" + _op(b"\x8c", arg) + b"\x85R."


def _marker_cmd(marker) -> str:
    return f"touch {marker}"


# ------------------------------------------------------------- plain `rlcore train` resumes
def test_route_a_metadata_naming_os_system_through_a_dcp_module(finished_run, tmp_path):
    """Issue 27 route (a): torch.distributed.checkpoint.filesystem + 'os.system' passed a prefix allow-list and ran."""
    cfg = copy_run(finished_run, tmp_path / "run")
    step2 = tmp_path.joinpath("run", *STEP2)
    marker = tmp_path / "PWNED"
    (step2 / "actor" / "dcp" / ".metadata").write_bytes(
        global_call_pickle("torch.distributed.checkpoint.filesystem", "os.system", _marker_cmd(marker))
    )
    _forge_manifest(step2)
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
    ok = code == 1 and "refused to load" in err and ".metadata" in err and "Traceback" not in err and not marker.exists()
    tally.record("malicious", "route a: .metadata naming os.system via a torch DCP module", ok)
    assert not marker.exists(), "the planted pickle ran"
    assert ok, out + err


def test_route_b_pickled_optimizer_value_inside_distcp(finished_run, tmp_path):
    """Issue 27 route (b): a pickled value among the DCP entries (as older rl-core wrote param_groups), .metadata clean.

    The resume must not unpickle it: the tensors load, the run goes on, no marker.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    cfg = copy_run(finished_run, tmp_path / "run")
    step2 = tmp_path.joinpath("run", *STEP2)
    marker = tmp_path / "PWNED"
    dcp_dir = step2 / "actor" / "dcp"
    dcp_to_torch_save(str(dcp_dir), str(tmp_path / "whole.pt"))  # our own file, written just now
    state = torch.load(tmp_path / "whole.pt", weights_only=False)
    plain = json.loads((step2 / "actor" / "optim_plain.json").read_text())
    groups = [{k: (tuple(v["__tuple__"]) if isinstance(v, dict) else v) for k, v in g.items()} for g in plain["param_groups"]]
    groups[0]["lr"] = WritesMarker(str(marker))
    state["optim"]["param_groups"] = groups
    shutil.rmtree(dcp_dir)
    (step2 / "actor" / "optim_plain.json").unlink()  # the older format had no JSON record
    dcp.save(state, checkpoint_id=str(dcp_dir))
    assert not marker.exists()
    kinds = {type(v).__name__ for v in read_dcp_metadata(str(dcp_dir / ".metadata")).state_dict_metadata.values()}
    assert "BytesStorageMetadata" in kinds  # the payload really is in __0_0.distcp
    _forge_manifest(step2)
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
    ok = code == 0 and "(step 2)" in out and not marker.exists() and [r["step"] for r in read_metrics(tmp_path / "run" / "out")] == [1, 2, 3]
    tally.record("malicious", "route b: pickled optimizer value inside __0_0.distcp (older format)", ok)
    assert not marker.exists(), "the planted pickle ran"
    assert ok, out + err


# ------------------------------------------------------------- each file, its loader
def _metadata_cases(marker):
    evil_md = global_call_pickle("torch.distributed.checkpoint.filesystem", "os.system", _marker_cmd(marker))
    return {
        "os.system via a DCP module attribute": evil_md,
        "builtins.open via __reduce__": payload(str(marker)),
        "a listed class's module attribute (dotted name)": global_call_pickle(
            "torch.distributed.checkpoint.metadata", "torch.load", str(marker)
        ),
        "posix.system": global_call_pickle("posix", "system", _marker_cmd(marker)),
        "a plain dict instead of Metadata": pickle.dumps({"state_dict_metadata": {}}),
    }


@pytest.mark.parametrize("case", sorted(_metadata_cases("m")))
def test_dcp_metadata_payloads(tmp_path, case):
    marker = tmp_path / "PWNED"
    path = tmp_path / ".metadata"
    path.write_bytes(_metadata_cases(marker)[case])
    with pytest.raises(CheckpointError, match="refused to load"):
        read_dcp_metadata(str(path))
    tally.record("malicious", f".metadata: {case}", not marker.exists())
    assert not marker.exists()


def _saved_metadata(tmp_path):
    import torch.distributed.checkpoint as dcp

    dcp.save({"w": torch.zeros(2)}, checkpoint_id=str(tmp_path / "dcp"))
    return tmp_path / "dcp" / ".metadata"


def test_dcp_metadata_pointing_outside_its_folder(tmp_path):
    path = _saved_metadata(tmp_path)
    md = read_dcp_metadata(str(path))
    for info in md.storage_data.values():
        info.relative_path = "../../../etc/passwd"
    path.write_bytes(pickle.dumps(md))
    with pytest.raises(CheckpointError, match="not a file of this folder"):
        read_dcp_metadata(str(path))
    tally.record("malicious", ".metadata: storage entry ../../etc/passwd", True)


def test_dcp_metadata_symlink_and_giant_file(tmp_path):
    path = _saved_metadata(tmp_path)
    link = tmp_path / "dcp2"
    link.mkdir()
    (link / ".metadata").symlink_to(path)
    with pytest.raises(CheckpointError, match="symbolic link"):
        read_dcp_metadata(str(link / ".metadata"))
    giant = tmp_path / "giant"
    with open(giant, "wb") as f:
        f.truncate((2 << 30) + 1)  # sparse: no disk used
    with pytest.raises(CheckpointError, match="bytes, more than"):
        read_dcp_metadata(str(giant))
    tally.record("malicious", ".metadata: symlink, 2 GiB header", True)


def test_torch_files_with_reduce_payloads(tmp_path):
    """trainer_state.pt (RNG state, data state) and extra_rank0.pt are read with weights_only=True."""
    marker = tmp_path / "PWNED"
    cases = {
        "pickle in the RNG state": {"step": 2, "data": {}, "rng": {"python": WritesMarker(str(marker))}},
        "pickle in the scheduler": {"scheduler": WritesMarker(str(marker)), "rng": {}},
        "an nn.Module": {"rng": torch.nn.Linear(1, 1)},
    }
    for name, obj in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.pt"
        torch.save(obj, path)
        with pytest.raises(CheckpointError, match="refused to load"):
            safe_load(str(path))
        tally.record("malicious", f"torch file: {name}", not marker.exists())
    assert not marker.exists()


def test_json_files_cannot_name_code_or_be_links(tmp_path):
    """optim_plain.json, run_config.json, COMPLETE: json only; tags cannot name anything; links and giant files refused."""
    plain = tmp_path / "optim_plain.json"
    plain.write_text(json.dumps({"state": {"w": {"x": {"__tensor__": [1], "dtype": "os.system"}}}, "param_groups": []}))
    from rl_train_fsdp.dcp_io import _from_json

    with pytest.raises(CheckpointError, match="not a torch dtype"):
        _from_json(read_plain(str(plain))["state"]["w"]["x"])
    step = tmp_path / "global_step_1"
    step.mkdir()
    (step / "run_config.json").symlink_to("/etc/hostname")
    with pytest.raises(CheckpointError, match="symbolic link"):
        read_run_config(str(step))
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(65 << 20)
    with pytest.raises(CheckpointError, match="more than rl-core ever writes"):
        read_json(str(big))
    tally.record("malicious", "json sidecars: dtype tag naming code, symlink, giant", True)


def test_config_yaml_with_a_python_tag(tmp_path):
    marker = tmp_path / "PWNED"
    (tmp_path / "config.yaml").write_text(f"trainer: !!python/object/apply:os.system [{_marker_cmd(marker)!r}]\n")
    with pytest.raises(OutputDirError, match="cannot be read"):
        read_previous_config(str(tmp_path))
    assert not marker.exists()
    tally.record("malicious", "config.yaml with !!python/object/apply", not marker.exists())


def test_symlinks_inside_a_checkpoint_are_damage(tmp_path):
    root = tmp_path / "checkpoints"
    ckpt = CheckpointManager(str(root))
    ckpt.save(1, lambda d: torch.save({"step": 1}, os.path.join(d, "trainer_state.pt")))
    step1 = root / "global_step_1"
    outside = tmp_path / "outside.pt"
    torch.save({"step": 1}, outside)
    (step1 / "trainer_state.pt").unlink()
    (step1 / "trainer_state.pt").symlink_to(outside)
    _forge_manifest(step1)
    assert "symbolic link" in (ckpt.verify(str(step1)) or "")
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(step1, elsewhere, symlinks=True)
    shutil.rmtree(step1)
    (root / "global_step_1").symlink_to(elsewhere, target_is_directory=True)
    with pytest.warns(UserWarning, match="symbolic link"):
        assert ckpt.latest(verify=True) is None
    tally.record("malicious", "symlinked file / step folder pointing outside", True)


# what each file a resume reads is covered by (file name -> test above)
COVERED = {
    "COMPLETE": "test_json_files_cannot_name_code_or_be_links (read with read_json, size cap)",
    "run_config.json": "test_json_files_cannot_name_code_or_be_links",
    "trainer_state.pt": "test_torch_files_with_reduce_payloads + test_checkpoint_safety (CLI)",
    "extra_rank0.pt": "test_torch_files_with_reduce_payloads + test_checkpoint_safety (CLI)",
    "optim_plain.json": "test_json_files_cannot_name_code_or_be_links",
    ".metadata": "test_route_a_* (CLI), test_dcp_metadata_*",
    "__0_0.distcp": "test_route_b_* (CLI), plugins/train_fsdp/tests/test_fsdp_checkpoint_safety.py",
}


def test_every_file_a_resume_reads_is_planted(finished_run):
    step2 = finished_run.joinpath(*STEP2)
    names = {p.name for p in step2.rglob("*") if p.is_file()}
    assert names <= set(COVERED), f"files without a planted-payload case: {sorted(names - set(COVERED))}"
    out = finished_run / "out"
    others = {p.name for p in out.iterdir() if p.is_file()}  # config.yaml, metrics.jsonl, the lock
    assert others <= {"config.yaml", "metrics.jsonl", ".rlcore.lock"}, others
    assert yaml.safe_load((out / "config.yaml").read_text())  # read with yaml.safe_load (see above)


def test_rng_state_of_the_wrong_shape_is_a_clear_error():
    """A trainer_state.pt that loads (plain data) but whose RNG state is nonsense: CheckpointError, not a traceback."""
    from rl_core.checkpoints.store import load_rng_state, save_rng_state

    good = save_rng_state()
    for bad in ({**good, "python": [3, "x", None]}, {**good, "numpy": [1, 2]}, {**good, "torch": torch.zeros(3)}, [1, 2]):
        with pytest.raises(CheckpointError):
            load_rng_state(bad)
    load_rng_state(good)
