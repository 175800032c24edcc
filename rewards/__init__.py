"""ragym rewards: plain reward functions, answer metrics, and the rubric that combines them per a recipe.

Importing this package registers every built-in reward (``outcome``, ``format``, ``verification``,
``retrieval_recall``, the ``docmemo_*``, ``memora_*`` and ``r3g_*`` terms).
"""

from ragym.envs.retrieval.ranking import ndcg_at_k, recall_at_k

# Registers the generic terms and each env's own (one module per env, named for it).
from ragym.rewards import docmemo, generic, kbvqa, memora, r3g  # noqa: F401
from ragym.rewards.answers import answer_metric_name, score_answer
from ragym.rewards.episode import Episode
from ragym.rewards.infoseek import infoseek_final_score
from ragym.rewards.registry import get_reward, register_reward, registered_rewards
from ragym.rewards.rubric import RewardError, Rubric, RubricResult

__all__ = [
    "Episode",
    "RewardError",
    "Rubric",
    "RubricResult",
    "answer_metric_name",
    "get_reward",
    "infoseek_final_score",
    "ndcg_at_k",
    "recall_at_k",
    "register_reward",
    "registered_rewards",
    "score_answer",
]
