"""The benchmarks' tests use the env tests' KB fixtures (the naive server serves the tiny KB)."""

from tests.envs.conftest import _private_cache, tiny_kb  # noqa: F401
