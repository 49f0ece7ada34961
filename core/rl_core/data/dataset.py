"""Prompt data: rows in verl's format (docs/data.md) -> tokenized prompts -> resumable batches.

:class:`PromptDataset` renders and tokenizes each row's prompt, dropping (or cutting) those over
``max_prompt_length``; :class:`PromptLoader` cuts it into left-padded :class:`~rl_core.batch.Batch` es in a seeded
order per epoch, and its ``state_dict()`` resumes at exactly the next batch an uninterrupted run would have produced.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from rl_core.batch import Batch
from rl_core.data.rows import ROLES, DataError, generator_name, validate_row  # noqa: F401 - re-exported: where users look

logger = logging.getLogger(__name__)


def read_rows(path: str, prompt_key: str = "prompt", image_key: str = "images", video_key: str = "videos") -> list[dict[str, Any]]:
    """The validated, canonical rows (:func:`validate_row`) of a ``.jsonl`` or ``.parquet`` file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(f"data file {path} does not exist; check data.train_files / data.val_files")
    if not path.endswith((".parquet", ".jsonl", ".json")):
        raise DataError(f"data file {path}: unknown format; use .jsonl (one JSON object per line) or .parquet")
    try:
        raw = _read_raw(path)
    except DataError:
        raise
    except UnicodeDecodeError as e:
        raise DataError(f"data file {path} is not UTF-8 text ({e}); write .jsonl files as UTF-8") from None
    except OSError as e:  # permissions, a directory, an unreadable disk
        raise DataError(f"data file {path} cannot be read: {e.strerror or e}") from None
    except Exception as e:  # noqa: BLE001 - pyarrow raises its own types for a damaged file
        if not path.endswith(".parquet"):
            raise
        raise DataError(f"data file {path} is not a readable parquet file ({type(e).__name__}: {str(e).strip()[:200]}); "
                        "it may be truncated or not parquet at all: write it again (e.g. `rlcore data ... --out FILE.parquet`)") from None
    if not raw:
        raise DataError(f"data file {path} has no rows")
    return [validate_row(r, f"{path}, row {i}", prompt_key, image_key, video_key) for i, r in enumerate(raw)]


def _read_raw(path: str) -> list[Any]:
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    raw = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                raw.append(json.loads(line))
            except ValueError as e:
                raise DataError(f"{path}, line {i + 1}: not valid JSON ({e})") from None
    return raw


# ------------------------------------------------------------------ dataset
def render_prompt(tokenizer: Any, messages: list[dict[str, str]], apply_chat_template: bool, where: str = "a prompt", tools: list[dict] | None = None,
                  template_kwargs: dict[str, Any] | None = None) -> str:
    """The prompt text the model sees: chat template + generation prompt, or the contents joined; a template that
    rejects the messages (a role it does not know, roles out of order) is a :class:`DataError` naming ``where``."""
    if not apply_chat_template:
        return "\n".join(m["content"] for m in messages)
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(f"the tokenizer ({getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)}) has no chat template; "
                        "set data.apply_chat_template=false to feed raw text, or use an instruct model's tokenizer")
    try:
        extra = {"tools": tools} if tools else {}  # multi-turn rollouts: the tools' schemas, where the template shows them
        extra.update(template_kwargs or {})  # data.chat_template_kwargs, e.g. enable_thinking
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **extra)
    except Exception as e:  # noqa: BLE001 - jinja2's TemplateError, or whatever the template raises
        roles = [m["role"] for m in messages]
        raise DataError(f"{where}: the tokenizer's chat template rejected the messages (roles {roles}): {type(e).__name__}: {e}; "
                        "fix the row's roles (e.g. system first, then user / assistant alternating) or set data.apply_chat_template=false") from None


def truncate(ids: list[int], length: int, side: str) -> list[int]:
    """``ids`` cut to ``length`` tokens: ``left`` keeps the end, ``right`` the start, ``middle`` both ends."""
    if len(ids) <= length:
        return ids
    if side == "left":
        return ids[len(ids) - length:]
    if side == "right":
        return ids[:length]
    head = length // 2
    return ids[:head] + ids[len(ids) - (length - head):]


class PromptDataset:
    """Tokenized prompts: dicts with ``input_ids`` and the row's fields. Prompts over ``max_prompt_length`` are dropped
    (``filter_overlong``; ``num_dropped``), else cut by ``truncation`` or an error. Rows with ``images`` are encoded by
    ``processor`` (rl-multimodal's ``ImageEncoder``: ``encode_rows`` here, ``item`` when an item is taken)."""

    def __init__(self, rows: Sequence[dict[str, Any]], tokenizer: Any, *, max_prompt_length: int, filter_overlong: bool = True,
                 apply_chat_template: bool = True, source: str = "data", origins: Sequence[str] | None = None,
                 tools: list[dict] | None = None, truncation: str = "error", template_kwargs: dict[str, Any] | None = None,
                 processor: Any = None, prompt_key: str = "prompt", image_key: str = "images") -> None:
        if max_prompt_length < 1:
            raise DataError(f"data.max_prompt_length must be >= 1, got {max_prompt_length}")
        self.source = source
        where = list(origins) if origins is not None else [f"{source}, row {i}" for i in range(len(rows))]
        self.processor, self._image_args = processor, (prompt_key, image_key, template_kwargs)
        with_images = next((i for i, r in enumerate(rows) if r.get("images")), None)
        if with_images is not None and processor is None:
            raise DataError(f"{where[with_images]}: the row holds images ({image_key!r}) but the model has no vision tower or its folder no "
                            "image processor (preprocessor_config.json), or rl-multimodal is not installed: use a vision-language model "
                            "(e.g. Qwen2.5-VL) with `pip install rl-multimodal`, or text-only rows")
        # {row index: (text, ids, image tensors)} of the rows with images
        encoded = processor.encode_rows(rows, where, apply_chat_template, *self._image_args) if with_images is not None else {}
        texts = [encoded[i][0] if i in encoded else render_prompt(tokenizer, r["prompt"], apply_chat_template, w, tools, template_kwargs)
                 for i, (r, w) in enumerate(zip(rows, where))]
        # a chat template writes BOS itself; raw text gets the tokenizer's usual special tokens
        ids = tokenizer(texts, add_special_tokens=not apply_chat_template)["input_ids"] if texts else []
        ids = [encoded[i][1] if i in encoded else tok for i, tok in enumerate(ids)]
        self.items: list[dict[str, Any]] = []
        self.num_dropped = 0
        for i, (row, text, tok) in enumerate(zip(rows, texts, ids)):
            if len(tok) > max_prompt_length and not filter_overlong and truncation != "error" and i not in encoded:
                tok = truncate(list(tok), max_prompt_length, truncation)  # data.truncation (verl's): keep a part
            if len(tok) > max_prompt_length:
                if not filter_overlong:
                    raise DataError(
                        f"{where[i]}: the prompt has {len(tok)} tokens > data.max_prompt_length="
                        f"{max_prompt_length}; raise max_prompt_length or set data.filter_overlong_prompts=true"
                        + (" (a prompt with images is never cut by data.truncation: its image tokens must stay whole)" if i in encoded else "")
                    )
                self.num_dropped += 1
                continue
            item = {**row, "prompt_text": text, "input_ids": list(tok)}
            if i in encoded:  # the images stay as read (bytes / paths); their tensors are made again when the item is taken
                item["origin"] = where[i]
            else:
                item.pop("images", None)
            self.items.append(item)
        if self.num_dropped:
            logger.warning("%s: dropped %d of %d prompts longer than max_prompt_length=%d tokens", source, self.num_dropped, len(rows),
                           max_prompt_length)
        if not self.items:
            raise DataError(f"{source}: no prompts left ({len(rows)} read, {self.num_dropped} longer than "
                            f"data.max_prompt_length={max_prompt_length}); raise max_prompt_length")

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Item ``i``; one with images gets ``multi_modal_inputs``, encoded now (a large image dataset is not held decoded)."""
        item = self.items[i]
        return self.processor.item(item, *self._image_args) if item.get("images") else item


def load_prompt_dataset(data: Any, tokenizer: Any, split: str = "train", tools: list[dict] | None = None, processor: Any = None,
                        extra_rows: Callable | None = None, custom_rows: Callable | None = None) -> PromptDataset:
    """The train or val :class:`PromptDataset` of a :class:`~rl_core.config.schema.DataConfig`: the files' rows, then
    ``extra_rows(data, split) -> (rows, origins, source or None)`` (rows made at start-up: rl-data's ``data.*_generator``,
    its ``generated_data`` feature's object); ``val_max_samples`` keeps the first N validation prompts.
    ``custom_rows(data, tokenizer, split, files) -> (rows, origins)``: the rows of the user's dataset class
    (``data.custom_cls``; the ``custom_dataset`` feature's object, rl-data's)."""
    if split not in ("train", "val"):
        raise DataError(f"split must be 'train' or 'val', got {split!r}")
    files = list(data.train_files if split == "train" else data.val_files)
    if extra_rows is None and generator_name(data, split):
        raise DataError(f"data.{split}_generator.name={generator_name(data, split)!r}: its rows are made by rl-data's generated_data feature, "
                        "which was not passed (extra_rows=: the plan's features.get('generated_data'))")
    rows: list[dict[str, Any]] = []
    origins: list[str] = []
    custom = getattr(data, "custom_cls", None)  # rl-data's section: the user's dataset class reads the files (verl's data.custom_cls)
    if custom is not None and custom.path and files:
        if custom_rows is None:
            raise DataError(f"data.custom_cls.path={custom.path!r}: the user's dataset class is read by rl-data's custom_dataset feature, "
                            "which was not passed (custom_rows=: the plan's features.get('custom_dataset'))")
        rows, origins = custom_rows(data, tokenizer, split, files)
    else:
        for path in files:
            got = read_rows(path, data.prompt_key, data.image_key, data.video_key)
            rows.extend(got)
            origins.extend(f"{path}, row {i}" for i in range(len(got)))
    got, where, made = extra_rows(data, split) if extra_rows is not None else ([], [], None)
    rows, origins = rows + got, origins + where
    if not rows:
        raise DataError(f"no {split} data: set data.{split}_files or data.{split}_generator")
    source = ", ".join(files + ([made] if made else []))
    ds = PromptDataset(rows, tokenizer, max_prompt_length=data.max_prompt_length, filter_overlong=data.filter_overlong_prompts,
                       apply_chat_template=data.apply_chat_template, source=source, origins=origins, tools=tools,
                       truncation=data.truncation, template_kwargs=data.chat_template_kwargs, processor=processor,
                       prompt_key=data.prompt_key, image_key=data.image_key)
    if split == "val" and data.val_max_samples is not None:
        ds.items = ds.items[: data.val_max_samples]
    return ds


# ------------------------------------------------------------------- loader
def pad_token_id_of(tokenizer: Any) -> int:
    """The tokenizer's pad id, else its eos id; an error if it has neither."""
    for attr in ("pad_token_id", "eos_token_id"):
        v = getattr(tokenizer, attr, None)
        if isinstance(v, int):
            return v
    raise DataError("the tokenizer has neither a pad token nor an eos token; set tokenizer.pad_token before loading data")


def collate(items: Sequence[dict[str, Any]], pad_token_id: int, uids: Sequence[str]) -> Batch:
    """A :class:`Batch` of prompts left-padded to the longest one."""
    width = max(len(it["input_ids"]) for it in items)
    input_ids = torch.full((len(items), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for r, it in enumerate(items):
        n = len(it["input_ids"])
        input_ids[r, width - n :] = torch.tensor(it["input_ids"], dtype=torch.long)
        mask[r, width - n :] = 1
    non = {k: [it[k] for it in items] for k in ("data_source", "ground_truth", "extra_info", "prompt_text")}
    non["uid"] = list(uids)
    if any(it.get("prompt") is not None for it in items):  # the messages, for multi-turn rollouts and reward models
        non["raw_prompt"] = [it.get("prompt") for it in items]
    if any(it.get("agent_name") for it in items):
        non["agent_name"] = [it.get("agent_name") for it in items]
    if any(it.get("multi_modal_inputs") for it in items):  # image inputs: the processor's tensors per prompt (rl-multimodal)
        non["multi_modal_inputs"] = [it.get("multi_modal_inputs") or {} for it in items]
    return Batch({"input_ids": input_ids, "attention_mask": mask}, non)


class PromptLoader:
    """Batches of a :class:`PromptDataset`, epoch after epoch. Epoch ``e``'s order is drawn from ``seed`` and ``e`` only,
    so ``{"epoch", "index"}`` resumes exactly. Iterating yields the rest of the epoch; :meth:`next_batch` crosses epochs.
    A prompt's ``uid`` is ``e<epoch>-i<index>``."""

    def __init__(self, dataset: PromptDataset, batch_size: int, shuffle: bool = True, seed: int = 0, drop_last: bool = True,
                 pad_token_id: int = 0) -> None:
        if batch_size < 1:
            raise DataError(f"batch size must be >= 1, got {batch_size}")
        if drop_last and len(dataset) < batch_size:
            raise DataError(f"{dataset.source}: {len(dataset)} prompts (after filtering) are fewer than one batch of "
                            f"{batch_size}; lower data.train_batch_size or add data")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.pad_token_id = pad_token_id
        self.epoch = 0
        self.index = 0  # prompts of this epoch's order already handed out

    def __len__(self) -> int:
        """Batches per epoch."""
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """Dataset indices in epoch ``epoch``'s order."""
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def next_batch(self) -> Batch:
        """The next batch, moving on to the next epoch when this one is used up."""
        n = len(self.dataset)
        idx = self.order(self.epoch)[self.index : self.index + self.batch_size]
        epoch = self.epoch
        self.index += len(idx)
        left = n - self.index
        if left == 0 or (self.drop_last and left < self.batch_size):
            self.epoch, self.index = self.epoch + 1, 0
        return self._batch(idx, epoch)

    def _batch(self, idx: np.ndarray, epoch: int) -> Batch:
        batch = collate([self.dataset[int(i)] for i in idx], self.pad_token_id, [f"e{epoch}-i{int(i)}" for i in idx])
        batch.meta["epoch"] = epoch
        return batch

    def __iter__(self) -> Iterator[Batch]:
        epoch = self.epoch
        while self.epoch == epoch:
            yield self.next_batch()

    def iterate_once(self) -> Iterator[Batch]:
        """One full pass in epoch 0's order, leaving the resumable position alone (validation)."""
        order = self.order(0)
        stop = len(self) * self.batch_size if self.drop_last else len(order)
        for start in range(0, stop, self.batch_size):
            yield self._batch(order[start : start + self.batch_size], 0)

    def state_dict(self) -> dict[str, int]:
        """Where the next batch starts: ``{"epoch", "index", "num_prompts"}``."""
        return {"epoch": self.epoch, "index": self.index, "num_prompts": len(self.dataset)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a :meth:`state_dict`; the dataset must be the same size as then."""
        try:
            epoch, index = int(state["epoch"]), int(state["index"])
        except (KeyError, TypeError, ValueError):
            raise DataError(f"loader state must have integer 'epoch' and 'index', got {state!r}") from None
        n = len(self.dataset)
        if "num_prompts" in state and state["num_prompts"] != n:
            raise DataError(f"the checkpoint's data loader saw {state['num_prompts']} prompts but {self.dataset.source} now has {n}; "
                            "the data (or max_prompt_length / filtering) changed, so the resumed order would differ")
        if epoch < 0 or not 0 <= index <= n:
            raise DataError(f"loader state epoch={epoch}, index={index} is out of range for {n} prompts")
        self.epoch, self.index = epoch, index


def build_loaders(data: Any, tokenizer: Any, seed: int = 0, tools: list[dict] | None = None, processor: Any = None,
                  extra_rows: Callable | None = None, custom_rows: Callable | None = None) -> tuple[PromptLoader, PromptLoader | None, dict[str, int]]:
    """Train and validation loaders of a ``DataConfig`` and the prompts kept / dropped (``train_prompts``, ...). The
    train loader shuffles with ``data.seed`` (else ``seed``) and drops a partial batch; the validation one (None without
    validation data) keeps file order and every prompt."""
    pad = pad_token_id_of(tokenizer)
    if processor is not None:
        processor.check_patch_size(data.image_patch_size)
    train = load_prompt_dataset(data, tokenizer, "train", tools, processor, extra_rows, custom_rows)
    # dynamic sampling (algorithm.filter_groups) draws rounds of data.gen_batch_size prompts
    train_loader = PromptLoader(train, data.gen_batch_size or data.train_batch_size, shuffle=data.shuffle,
                                seed=data.seed if data.seed is not None else seed, drop_last=True, pad_token_id=pad)
    info = {"train_prompts": len(train), "train_dropped": train.num_dropped, "val_prompts": 0, "val_dropped": 0}
    val_loader = None
    if data.val_files or generator_name(data, "val"):
        val = load_prompt_dataset(data, tokenizer, "val", tools, processor, extra_rows, custom_rows)
        val_loader = PromptLoader(val, data.val_batch_size or len(val), shuffle=False, drop_last=False, pad_token_id=pad)
        info.update(val_prompts=len(val), val_dropped=val.num_dropped)
    return train_loader, val_loader, info
