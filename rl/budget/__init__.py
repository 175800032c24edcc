"""``ragym budget``: tokens per episode at a recipe's settings, and the share a recipe's lengths would truncate.

The paper's longest episode is played on each row with a scripted policy (``ragym.rl.budget.episodes``) through the
env built as the agent loop builds it; its tokens are counted with a real tokenizer and the processor's own
resize rule (``ragym.rl.budget.tokens``); ``ragym.rl.budget.report`` prints the distribution and the truncated share.
"""
