"""ragym's RL side: the verl agent loop, the local GRPO engine, export, evaluation and the command line."""
