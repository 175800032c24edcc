"""ragym rewards: plain reward functions, answer metrics, and the rubric that combines them per a recipe."""

from rewards.episode import Episode
from rewards.registry import get_reward, register_reward, registered_rewards

__all__ = ["Episode", "get_reward", "register_reward", "registered_rewards"]
