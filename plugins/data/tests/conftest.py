"""The shared data folder fixture of the repository's tests (tests/conftest.py: the GSM8K copy, when present) and the
data tests' tiny tokenizer (tests/infra/conftest.py: the dataset-class tests moved here with rl_data.custom), and ``env``:
a monkeypatch after which the plugin registry is read again (the tests that block rl-data)."""

import pytest
from rl_core.plugins import get_registry

from tests.conftest import shared_data  # noqa: F401 - a fixture
from tests.infra.conftest import _tiny_tokenizer_dir, tiny_tokenizer  # noqa: F401 - fixtures


@pytest.fixture
def env(monkeypatch):
    yield monkeypatch
    monkeypatch.undo()
    get_registry(reload=True)
