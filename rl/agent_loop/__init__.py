"""The verl adapter: one agent loop that drives any registered ragym env, with its observation
rendering and chat template. Recipes name it ``ragym.rl.agent_loop.loop.RagymEnvAgentLoop`` (the path verl's
``@register`` records); ``ragym.rl.agent_loop.RagymEnvAgentLoop`` resolves to the same class.

The loop module imports verl's agent loop (about 5 s of torch, tensordict and verl), so the package loads it only
when that name is asked for: the chat template and the observation rendering (the tiny policy's builder, the token
budget) import without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragym.rl.agent_loop.loop import RagymEnvAgentLoop

__all__ = ["RagymEnvAgentLoop"]


def __getattr__(name: str) -> Any:
    if name == "RagymEnvAgentLoop":
        from ragym.rl.agent_loop.loop import RagymEnvAgentLoop

        return RagymEnvAgentLoop
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
