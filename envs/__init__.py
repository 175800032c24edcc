"""ragym environments. Importing this package registers every environment with gymnasium."""

from envs.core import Hit, Observation, Retriever
from envs.registry import make_env, register_env, registered_envs

# Registrations: one line per environment (entry points are imported lazily by gymnasium).
# register_env("KBVQA-v0", "envs.kbvqa:KBVQAEnv")      # added by the KB-VQA module
# register_env("DocMemo-v0", "envs.docmemo:DocMemoEnv")  # added by the DocMemo module

__all__ = ["Hit", "Observation", "Retriever", "make_env", "register_env", "registered_envs"]
