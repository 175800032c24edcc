"""Evaluation: `ragym eval` (the paper's metrics through the agent loop) and `ragym rollout` (scripted policies)."""
