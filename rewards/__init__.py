"""ragym rewards: plain reward functions, answer metrics, and the rubric that combines them per a recipe.

Importing this package registers every built-in reward (``outcome``, ``format``, ``verification``,
``retrieval_recall``, the ``docmemo_*``, ``memora_*`` and ``r3g_*`` terms).
"""

from rewards import docmemo, kbvqa, memora, r3g, verification  # noqa: F401  (registers the DocMemo, KB-VQA, MEMORA, R3G rewards)
from rewards.answers import answer_metric_name, score_answer
from rewards.episode import Episode
from rewards.infoseek import infoseek_final_score
from rewards.registry import get_reward, register_reward, registered_rewards
from rewards.retrieval import ndcg_at_k, recall_at_k
from rewards.rubric import RewardError, Rubric, RubricResult

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
