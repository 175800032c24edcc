"""The CPU demo: synthetic KB, tiny policy, warm start, GRPO, before/after evaluation, report."""
