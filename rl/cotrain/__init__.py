"""Retriever co-training: the retriever learns from the policy's own verified rollouts while GRPO runs."""
