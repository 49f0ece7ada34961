"""rl-clean's tests: a finished tiny run, once per module (tests/e2e/helpers.py)."""

from tests.e2e.helpers import finished_run  # noqa: F401 (a fixture)
