"""The shared data folder fixture of the repository's tests (tests/conftest.py: the GSM8K copy, when present)."""

from tests.conftest import shared_data  # noqa: F401 - a fixture
