"""The verl adapter: one agent loop that drives any registered ragym env, with its observation
rendering and chat template. Recipes name it ``ragym.rl.agent_loop.loop.RagymEnvAgentLoop`` (the path verl's
``@register`` records); ``ragym.rl.agent_loop.RagymEnvAgentLoop`` resolves to the same class."""

from ragym.rl.agent_loop.loop import RagymEnvAgentLoop

__all__ = ["RagymEnvAgentLoop"]
