"""Image inputs: verl's multimodal rows -> the processor's ids and pixels -> hf rollout and actor log-probs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.data.dataset import DataError, PromptDataset, collate, read_rows, validate_row
from rl_core.rollout.hf import factory as hf_factory
from rl_core_testing.tiny_vlm import ARCHS, IMAGE_PAD_ID, VISION_END_ID, VISION_START_ID, make_tiny_vlm_dir, png_bytes
from rl_multimodal import checks
from rl_multimodal import forward as multimodal
from rl_multimodal import images as img
from rl_multimodal.feature import FEATURE

WITH_IMAGES = WorkerContext(features={"multimodal": FEATURE})  # the Plan's feature, as a worker hands it to its engines

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    return make_tiny_vlm_dir(tmp_path_factory.mktemp("vlm") / "model")


@pytest.fixture(scope="module")
def processor(vlm_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return img.ImageEncoder(img.load_processor(str(vlm_dir)))


def _row(content, images, **extra):
    row = {"data_source": "hiyouga/geometry3k", "prompt": [{"role": "user", "content": content}], "reward_model": {"ground_truth": "3"}, **extra}
    if images is not None:
        row["images"] = images
    return row


def _dataset(processor, raw_rows, **kw):
    rows = [validate_row(r, f"data, row {i}", "prompt") for i, r in enumerate(raw_rows)]
    return PromptDataset(rows, processor.processor.tokenizer, max_prompt_length=200, processor=processor, **kw)


# ------------------------------------------------------------------------ data
def test_image_rows_get_the_image_tokens_and_pixels(processor):
    # 50 x 60 px -> resized to the nearest multiples of 28 (patch 14 x merge 2) within [28^2, 56^2] pixels: 56 x 56
    # -> a grid of 1 x 4 x 4 patches of 14 px (16 rows of pixel_values, 3 * 2 * 14 * 14 values each) -> 4 merged tokens
    ds = _dataset(processor, [_row("<image>Find x.", [{"bytes": png_bytes(50, 60), "path": None}]), _row("text only", None)])
    item = ds[0]
    mm = item["multi_modal_inputs"]
    assert mm["image_grid_thw"].tolist() == [[1, 4, 4]] and tuple(mm["pixel_values"].shape) == (16, 3 * 2 * 14 * 14)
    ids = item["input_ids"]
    start = ids.index(VISION_START_ID)
    assert ids[start + 1 : start + 6] == [IMAGE_PAD_ID] * 4 + [VISION_END_ID]
    assert processor.processor.tokenizer.decode(ids[start + 6 :]).startswith("Find x.<|im_end|>")
    assert "multi_modal_inputs" not in ds[1] and IMAGE_PAD_ID not in ds[1]["input_ids"] and "images" not in item
    # only the images as read are held; the tensors are made when an item is taken, the same each time
    assert "multi_modal_inputs" not in ds.items[0] and ds.items[0]["images"][0]["bytes"]
    assert torch.equal(ds[0]["multi_modal_inputs"]["pixel_values"], mm["pixel_values"])
    batch = collate([ds[0], ds[1]], 0, ["a", "b"])
    assert batch.non_tensors["multi_modal_inputs"][1] == {} and torch.equal(batch.non_tensors["multi_modal_inputs"][0]["image_grid_thw"], mm["image_grid_thw"])
    assert "images" not in batch.non_tensors


def test_two_images_in_order_and_every_source_form(processor, tmp_path):
    from PIL import Image

    path = tmp_path / "b.png"
    path.write_bytes(png_bytes(28, 84, seed=2))  # 28 x 84: grid 1 x 2 x 6 -> 3 tokens
    pil = Image.open(tmp_path / "b.png")
    for second in ({"bytes": None, "path": str(path)}, str(path), pil):
        ds = _dataset(processor, [_row("Compare <image> with <image>.", [{"bytes": png_bytes(56, 28, seed=1)}, second])])
        mm = ds[0]["multi_modal_inputs"]
        assert mm["image_grid_thw"].tolist() == [[1, 4, 2], [1, 2, 6]]
        assert ds[0]["input_ids"].count(IMAGE_PAD_ID) == 2 + 3


def test_parquet_rows_keep_their_images(processor, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [_row("<image>a", [{"bytes": png_bytes(40, 40), "path": None}]), _row("b", None)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    read = read_rows(str(tmp_path / "d.parquet"))
    assert read[0]["images"][0]["bytes"] == rows[0]["images"][0]["bytes"] and "images" not in read[1]
    assert read_rows(str(tmp_path / "d.parquet"), image_key="pictures")[0].get("images") is None


@pytest.mark.parametrize(
    "content, images, message",
    [
        ("<image><image>two marks", [{"bytes": png_bytes(28, 28)}], r"2 <image> placeholder\(s\) but 'images' holds 1 image"),
        ("no mark", [{"bytes": png_bytes(28, 28)}], r"0 <image> placeholder"),
        ("<image>x", [{"bytes": b"not a picture"}], r"data, row 0, 'images'\[0\]: the image does not decode"),
        ("<image>x", ["https://example.com/a.png"], r"'images'\[0\]: image 'https://example.com/a.png' is a URL; .*local"),
        ("<image>x", ["/nowhere/a.png"], r"image file '/nowhere/a.png' does not exist"),
        ("<image>x", [{"path": None, "bytes": None}], r"needs 'bytes' or 'path'"),
        ("<image>x", [3], r"an image must be"),
    ],
)
def test_bad_image_rows_are_named(processor, content, images, message):
    with pytest.raises(DataError, match=message):
        _dataset(processor, [_row(content, images)])


def test_long_image_prompts_are_dropped_or_named_never_cut(processor):
    rows = [validate_row(_row("<image>" + "x" * 40, [{"bytes": png_bytes(50, 60)}]), "data, row 0", "prompt"),
            validate_row(_row("y" * 40, None), "data, row 1", "prompt")]
    lengths = [len(it["input_ids"]) for it in PromptDataset(rows, processor.processor.tokenizer, max_prompt_length=200, processor=processor)]
    assert lengths[0] > lengths[1]  # the image row is the longer one (its 4 image tokens)
    kw = dict(max_prompt_length=lengths[0] - 1, processor=processor)
    dropped = PromptDataset(rows, processor.processor.tokenizer, **kw)
    assert dropped.num_dropped == 1 and len(dropped) == 1 and "multi_modal_inputs" not in dropped[0]
    with pytest.raises(DataError, match=r"data, row 0: the prompt has \d+ tokens .* never cut by data.truncation"):
        PromptDataset(rows, processor.processor.tokenizer, truncation="left", filter_overlong=False, **kw)


def test_videos_and_audio_are_refused_by_key():
    with pytest.raises(DataError, match=r"row 0: the row holds videos under 'videos'; rl-core reads image inputs only"):
        validate_row(_row("x", None, videos=[{"path": "a.mp4"}]), "row 0", "prompt")
    with pytest.raises(DataError, match=r"under 'clips'"):
        validate_row(_row("x", None, clips=["a.mp4"]), "row 0", "prompt", video_key="clips")
    assert "images" not in validate_row(_row("x", np.array([]), videos=None), "row 0", "prompt")  # parquet's empty columns


def test_images_with_a_text_model_name_the_fix(tiny_model_dir):
    from rl_core.modeling import load_tokenizer

    text_model = tiny_model_dir("qwen2")
    assert img.processor_for_model(ModelConfig(path=str(text_model))) is None  # no vision tower: no processor
    rows = [validate_row(_row("<image>x", [{"bytes": png_bytes(28, 28)}]), "data, row 0", "prompt")]
    with pytest.raises(DataError, match=r"data, row 0: the row holds images \('images'\) but the model has no vision tower"):
        PromptDataset(rows, load_tokenizer(text_model), max_prompt_length=100, processor=None)


def test_image_patch_size_is_the_processors(processor):
    processor.check_patch_size(None)
    processor.check_patch_size(14)
    with pytest.raises(DataError, match=r"data.image_patch_size=16: .*its patch_size is 14\); set data.image_patch_size=14 or leave it out"):
        processor.check_patch_size(16)


def test_image_patch_size_checked_before_the_data_is_read(vlm_dir, tmp_path):
    """`rlcore check` compares data.image_patch_size with the folder's processor files (no processor loaded)."""
    import json
    import shutil

    from rl_multimodal.checks import patch_size_problems, processor_patch_size

    cfg = RunConfig(model=ModelConfig(path=str(vlm_dir)), data=DataConfig(image_patch_size=14))
    assert processor_patch_size(vlm_dir) == 14
    assert patch_size_problems(cfg) == []
    assert patch_size_problems(RunConfig(model=ModelConfig(path=str(vlm_dir)))) == []
    (p,) = patch_size_problems(RunConfig(model=ModelConfig(path=str(vlm_dir)), data=DataConfig(image_patch_size=16)))
    assert p.key == "data.image_patch_size" and "patch_size 14" in p.what and p.fix == "set data.image_patch_size=14 or leave it out"
    # a folder whose processor records its settings under processor_config.json's image_processor section
    other = tmp_path / "nested"
    shutil.copytree(vlm_dir, other)
    (other / "preprocessor_config.json").unlink()
    (other / "processor_config.json").write_text(json.dumps({"image_processor": {"patch_size": 16}}))
    assert processor_patch_size(other) == 16
    (p,) = patch_size_problems(RunConfig(model=ModelConfig(path=str(other)), data=DataConfig(image_patch_size=14)))
    assert "patch_size 16" in p.what


def test_verl_image_keys_map():
    from rl_core.config.load import load_config
    from rl_core.problems import ConfigError

    cfg = load_config(None, ["data.image_key=pictures", "data.video_key=clips", "data.image_patch_size=14"])
    assert (cfg.data.image_key, cfg.data.video_key, cfg.data.image_patch_size) == ("pictures", "clips", 14)
    with pytest.raises(ConfigError, match=r"data.audio_key"):
        load_config(None, ["data.audio_key=sounds"])


# ------------------------------------------------------------------- numerics
def _reference_log_probs(model, out, r):
    """Row ``r``'s response log-probs from a plain ``model(**inputs)`` over its unpadded tokens (the model computes
    its own 3-D positions there)."""
    keep = out["attention_mask"][r].bool()
    ids = out["input_ids"][r][keep].unsqueeze(0)
    mm = dict(out.non_tensors["multi_modal_inputs"][r])
    if mm:
        mm["mm_token_type_ids"] = (ids == IMAGE_PAD_ID).int()
    with torch.no_grad():
        logits = model(input_ids=ids, **mm).logits[0].float()
    n = int(out["response_mask"][r].sum())
    return torch.log_softmax(logits[-n - 1 : -1], -1).gather(-1, out["responses"][r][:n, None])[:, 0]


@pytest.mark.parametrize("arch", ARCHS)
def test_rollout_and_actor_log_probs_equal_a_plain_forward(tmp_path, arch):
    """Qwen2-VL, Qwen2.5-VL (windowed vision attention), Qwen3-VL (interleaved mrope, deepstack features) and Qwen3.5
    (a linear-attention layer: the rollout prefills each sample's copy, its cache cannot be repeated)."""
    from rl_core_testing.train_conformance import default_config
    from rl_train_fsdp.engine import build_engine
    from transformers import AutoModelForImageTextToText

    vlm_dir = make_tiny_vlm_dir(tmp_path / arch, arch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processor = img.ImageEncoder(img.load_processor(str(vlm_dir)))

    ds = _dataset(processor, [
        _row("<image>What is x?", [{"bytes": png_bytes(50, 60)}]),
        _row("Compare <image> and <image>, please", [{"bytes": png_bytes(40, 40, 1)}, {"bytes": png_bytes(70, 30, 2)}]),
        _row("no image here", None),
    ])
    prompts = collate([ds[i] for i in range(3)], 0, ["a", "b", "c"])
    cfg = RunConfig(model=ModelConfig(path=str(vlm_dir)), data=DataConfig(max_prompt_length=200), rollout=RolloutConfig())
    rollout = hf_factory(cfg, WITH_IMAGES)
    out = rollout.generate(prompts, SamplingParams(n=2, max_new_tokens=6, temperature=1.0, seed=0, logprobs=True))
    assert len(out) == 6 and out.non_tensors["multi_modal_inputs"][2] is out.non_tensors["multi_modal_inputs"][3]
    model = AutoModelForImageTextToText.from_pretrained(str(vlm_dir), dtype=torch.float32).eval()
    actor = build_engine("actor", default_config(vlm_dir), WorkerContext())
    out["old_log_probs"] = actor.compute_log_prob(out)["log_probs"]
    for r in range(len(out)):
        n = int(out["response_mask"][r].sum())
        ref = _reference_log_probs(model, out, r)
        torch.testing.assert_close(out["rollout_log_probs"][r][:n], ref, atol=2e-5, rtol=0)
        torch.testing.assert_close(out["old_log_probs"][r][:n], ref, atol=2e-5, rtol=0)
    # the images matter: another image in row 0 changes its log-probs
    swapped = out.index([0])  # a copy of row 0
    swapped.non_tensors["multi_modal_inputs"][0] = {**swapped.non_tensors["multi_modal_inputs"][0]}
    swapped.non_tensors["multi_modal_inputs"][0]["pixel_values"] = swapped.non_tensors["multi_modal_inputs"][0]["pixel_values"].flip(0)
    other = actor.compute_log_prob(swapped)["log_probs"][0]
    assert (other - out["old_log_probs"][0]).abs().max() > 1e-3


def test_backends_without_images_are_refused_by_key(vlm_dir, processor, tmp_path):
    import attrs
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core_testing.tiny_run import write_tiny_run

    stack, problems = resolve(load_config(write_tiny_run(tmp_path)))
    assert stack is not None, [p.render() for p in problems]
    assert stack.rollout.images and stack.train.images  # hf + fsdp read images
    ds = _dataset(processor, [_row("<image>x", [{"bytes": png_bytes(28, 28)}])])
    text_only = _dataset(processor, [_row("x", None)])
    assert checks.stack_problems(stack, [ds, None]) == []
    other = attrs.evolve(stack, rollout=attrs.evolve(stack.rollout, name="vllm", images=False), train=attrs.evolve(stack.train, name="megatron", images=False))
    assert checks.stack_problems(other, [text_only]) == []  # nothing to carry
    assert "rlcore plugins" in checks.stack_problems(other, [ds])[0].render()  # a run: no registry to ask
    from rl_core.plugins import get_registry

    keys = {p.key: p.render() for p in checks.stack_problems(other, [ds], get_registry())}
    assert "installed: hf" in keys["rollout.name"] and "is 'vllm'" in keys["rollout.name"]
    assert "installed: fsdp" in keys["train.name"]
    gae = attrs.evolve(stack, estimator=attrs.evolve(stack.estimator, needs_critic=True))
    assert [p.key for p in checks.stack_problems(gae, [ds])] == ["algorithm.adv_estimator"]
    assert checks.stack_problems(stack, [ds, text_only]) == []  # one train rank: rows with and without images mix
    two = attrs.evolve(stack, sizes=attrs.evolve(stack.sizes, world_size=2, train_dp=2))
    assert [p.key for p in checks.stack_problems(two, [ds, text_only])] == ["data.train_files"]
    assert checks.stack_problems(two, [ds]) == []


def test_the_rollout_never_samples_image_tokens_and_a_response_with_one_is_named(vlm_dir, processor):
    ds = _dataset(processor, [_row("<image>What is x?", [{"bytes": png_bytes(50, 60)}])])
    prompts = collate([ds[0]], 0, ["a"])
    engine = hf_factory(RunConfig(model=ModelConfig(path=str(vlm_dir)), data=DataConfig(max_prompt_length=200)), WITH_IMAGES)
    with torch.no_grad():  # the image-pad token becomes by far the likeliest next token
        engine.model.get_output_embeddings().weight[IMAGE_PAD_ID] = 50 * engine.model.get_output_embeddings().weight[IMAGE_PAD_ID].sign()
    out = engine.generate(prompts, SamplingParams(n=4, max_new_tokens=4, temperature=1.0, seed=0, logprobs=True))
    assert IMAGE_PAD_ID not in out["responses"].tolist()[0] and not (out["responses"] == IMAGE_PAD_ID).any()
    # the reported log-probs are the full distribution's (as the trainer computes them): very negative here
    for r in range(len(out)):
        torch.testing.assert_close(out["rollout_log_probs"][r][:1], _reference_log_probs(engine.model, out, r)[:1], atol=1e-4, rtol=0)
    bad = out["input_ids"].clone()
    bad[0, -1] = IMAGE_PAD_ID
    with pytest.raises(ValueError, match=r"a response holds one of the model's image / video tokens \[261, 262\]"):
        multimodal.forward_response(engine.model, bad, out["attention_mask"], out["responses"], list(out.non_tensors["multi_modal_inputs"]))
