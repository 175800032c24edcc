"""What both engines share: GRPO maths, the HF generation server, rollout batching, dynamic sampling, episode
metrics, vision inputs, the checkpoint folder's marker."""
