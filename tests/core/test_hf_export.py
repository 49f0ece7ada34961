"""save_hf's streamed writer (rl_core.train_engine.hf_export, issue #32): safetensors shards written one at a time,
in transformers' layout, loading to the same weights as a single-file save, with at most one shard held."""

from __future__ import annotations

import json

import pytest
import torch
from rl_core.train_engine.hf_export import INDEX_NAME, WEIGHTS_NAME, ShardWriter, write_hf_folder

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir("qwen2", hidden=32, layers=2), dtype=torch.float32)


class _Config:
    class model:  # noqa: N801 - the shape of config.model write_hf_folder reads
        tokenizer_path = None
        path = None


def _weights(model):
    seen = set()
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) not in seen:  # tied weights once, as named_weights yields them
            seen.add(id(t))
            yield name, t.detach()


def test_sharded_export_loads_with_transformers_and_equals_the_single_file_save(model, tmp_path):
    from transformers import AutoModelForCausalLM

    sizes = {n: t.numel() * t.element_size() for n, t in _weights(model)}
    limit = max(sizes.values())  # the embedding alone fills a shard: several shards on the tiny model
    one = write_hf_folder(tmp_path / "one", _weights(model), model.config, type(model), None, _Config)
    many = write_hf_folder(tmp_path / "many", _weights(model), model.config, type(model), None, _Config, max_shard_bytes=limit)
    assert one.files == [WEIGHTS_NAME] and not (tmp_path / "one" / INDEX_NAME).exists()
    n = len(many.files)
    assert n >= 3 and many.files == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    index = json.loads((tmp_path / "many" / INDEX_NAME).read_text())
    assert set(index["weight_map"]) == set(sizes) and set(index["weight_map"].values()) == set(many.files)
    assert index["metadata"]["total_size"] == sum(sizes.values()) == many.total_bytes
    assert sorted(p.name for p in (tmp_path / "many").glob("*.safetensors")) == many.files  # no temporary file left
    # the writer held one shard at a time, never the model
    assert many.peak_bytes <= limit < sum(sizes.values()) and one.peak_bytes == sum(sizes.values())
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "one", dtype=torch.float32).state_dict()
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "many", dtype=torch.float32).state_dict()
    want = model.state_dict()
    assert a.keys() == b.keys() == want.keys()
    for k in want:
        assert torch.equal(a[k], b[k]) and torch.equal(b[k], want[k]), k


def test_writer_casts_copies_views_and_keeps_a_large_tensor_alone(tmp_path):
    from safetensors.torch import load_file

    segment = torch.arange(64, dtype=torch.float32)  # two views into one storage, as offloaded host buffers are
    w = ShardWriter(tmp_path, max_shard_bytes=40, dtype=torch.bfloat16)
    w.add("a", segment[:8])
    w.add("b", segment[8:40])  # 64 bytes in bfloat16 > 40: a shard of its own
    w.add("c", segment[40:48])
    with pytest.raises(ValueError, match="written twice"):
        w.add("a", segment[:8])
    assert w.close() == ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"]
    assert w.peak_bytes == 64
    got = {k: v for f in w.files for k, v in load_file(str(tmp_path / f)).items()}
    for name, part in (("a", segment[:8]), ("b", segment[8:40]), ("c", segment[40:48])):
        assert got[name].dtype == torch.bfloat16 and torch.equal(got[name], part.to(torch.bfloat16)), name
