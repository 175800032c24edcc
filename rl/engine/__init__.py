"""The local GRPO engine: one process, an in-process HF generation server, the ragym agent loop, verl's GRPO."""
