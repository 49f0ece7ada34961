"""What other packages' tests reuse of rl-data: a dataset class in verl's RLHFDataset contract (``data.custom_cls``)
and a data file in a format only that class reads."""

from __future__ import annotations

import textwrap
from pathlib import Path

# verl's RLHFDataset contract: built with (data_files, tokenizer, config, processor, max_samples); items are row dicts
# whose chat messages are under raw_prompt. This one reads a csv-like text format rl-core's reader does not know.
CLASS = textwrap.dedent('''
    class Lines:
        def __init__(self, data_files, tokenizer, config, processor=None, max_samples=-1):
            assert processor is None and tokenizer is not None
            self.rows = [line.strip().split("|") for f in data_files for line in open(f) if line.strip()]
            if max_samples > 0:
                self.rows = self.rows[:max_samples]
            self.seen_prompt_key = config.get("prompt_key")
            self.seen_max_len = config.max_prompt_length

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            q, a = self.rows[i]
            return {"data_source": "lines", "raw_prompt": [{"role": "user", "content": "Q: " + q}],
                    "reward_model": {"ground_truth": a}, "extra_info": {"index": i}, "dummy_tensor": [0]}

    class NoRows(Lines):
        def __getitem__(self, i):
            return {"data_source": "lines", "raw_prompt": [{"role": "user", "content": "hi"}]}

    class NotADict(Lines):
        def __getitem__(self, i):
            return ("hi", "1")

    class OldSignature:
        def __init__(self, files):
            pass
        def __len__(self):
            return 0
        def __getitem__(self, i):
            return {}

    class Iterable:
        def __iter__(self):
            return iter(())

    compute = 3
''')


def write_dataset_class(folder: Path) -> tuple[str, str]:
    """``(the .py file of CLASS's classes, a data file of six "question|answer" lines)`` in ``folder``."""
    code = folder / "my_dataset.py"
    code.write_text(CLASS)
    data = folder / "qa.txt"
    data.write_text("".join(f"what is {i} plus {i} ?|{2 * i}\n" for i in range(6)))
    return str(code), str(data)
