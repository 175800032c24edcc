"""The verl row every data preparation writes.

A row is verl's parquet schema (``data_source``, ``agent_name``, ``prompt``, ``ability``, ``reward_model``,
``extra_info``) with ragym's ``extra_info``: the env id, the env's constructor kwargs and its reset options, as
JSON strings (parquet keeps one schema for every env).
"""

from __future__ import annotations

import json
from typing import Any

AGENT_NAME = "ragym_env"
"""The agent loop every row asks verl for (``ragym.rl.agent_loop`` registers it under this name)."""


def verl_row(
    *,
    data_source: str,
    ability: str,
    question: str,
    ground_truth: Any,
    index: int,
    split: str,
    env_id: str,
    env_kwargs: dict[str, Any],
    env_options: dict[str, Any] | None,
    **extra_info: Any,
) -> dict[str, Any]:
    """One verl row: ``question`` as the prompt, the ground truth for the reward, the env to reset and how.

    ``extra_info`` keys beyond ragym's (a sample id, a scenario) go into ``extra_info`` as given.

    >>> row = verl_row(data_source="d", ability="a", question="Q?", ground_truth={"answer": "x"}, index=0,
    ...                split="test", env_id="KBVQA-v0", env_kwargs={"k": 1}, env_options={"question": "Q?"})
    >>> row["reward_model"], row["extra_info"]["env_kwargs"]
    ({'style': 'rule', 'ground_truth': '{"answer": "x"}'}, '{"k": 1}')
    """
    return {
        "data_source": data_source,
        "agent_name": AGENT_NAME,
        "prompt": [{"role": "user", "content": question}],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": json.dumps(ground_truth, ensure_ascii=False)},
        "extra_info": {
            "index": index,
            "split": split,
            "env_id": env_id,
            "env_kwargs": json.dumps(env_kwargs, ensure_ascii=False),
            "env_options": json.dumps(env_options, ensure_ascii=False),
            **extra_info,
        },
    }
