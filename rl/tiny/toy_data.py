"""Toy training rows for every environment, from its built-in synthetic data, in verl's row schema.

``ragym train --engine verl --toy DIR`` trains any shipped recipe on these (with a tiny policy), so the whole
cluster path (verl's trainer, the agent loop, the env, the reward recipe) runs on a laptop in minutes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from rl.agent_loop.loop import AGENT_NAME

TOY_ENVS = {"kbvqa": "KBVQA-v0", "docmemo": "DocMemo-v0", "memora": "MEMORA-v0", "r3g": "R3G-v0"}
"""The environment a shipped recipe trains, by the first word of its file name (``kbvqa_qwen2_5_vl_7b``)."""


def toy_env(recipe: Path) -> str:
    """The environment ``recipe`` trains, by its name; an error names the recipes toy data exists for."""
    env_id = TOY_ENVS.get(recipe.stem.split("_")[0])
    if env_id is None:
        raise ValueError(
            f"{recipe.name}: toy data exists for recipes named {', '.join(f'{p}_*' for p in TOY_ENVS)}"
        )
    return env_id


NUM_TOY_ROWS = 16
"""Rows per split where the env's synthetic data is a stream of questions (DocMemo, MEMORA)."""
COLUMNS = ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]


def toy_rows(env_id: str, out: Path) -> Path:
    """Write ``out/data/{train,test}.parquet`` for ``env_id`` (once; reused after) and return ``out/data``."""
    data = out / "data"
    if (data / "test.parquet").is_file():
        return data
    if env_id == "KBVQA-v0":
        from data_prep.synthetic_kb import main as build_kb

        if build_kb(["--out", str(out), "--preset", "tiny"]) != 0:
            raise RuntimeError(f"building the tiny synthetic KB in {out} failed")
    elif env_id == "R3G-v0":
        from data_prep.r3g_synthetic import PRESETS, build_task

        build_task(out, PRESETS["tiny"])
    elif env_id in _STREAMS:
        data.mkdir(parents=True, exist_ok=True)
        for split, offset in (("train", 0), ("test", NUM_TOY_ROWS)):
            records = [_STREAMS[env_id](offset + i, split) for i in range(NUM_TOY_ROWS)]
            pd.DataFrame.from_records(records, columns=COLUMNS).to_parquet(data / f"{split}.parquet")
    else:
        raise ValueError(f"no toy data for {env_id}; toy data exists for {sorted(TOY_ENVS.values())}")
    return data


def _row(
    env_id: str, index: int, split: str, source: str, truth: dict, options: dict | None
) -> dict[str, Any]:
    """One verl row that resets ``env_id`` with ``options`` (None: the env's own synthetic draw for the seed)."""
    return {
        "data_source": source,
        "agent_name": AGENT_NAME,
        "prompt": [{"role": "user", "content": "(the env writes the prompt)"}],
        "ability": env_id.split("-")[0].lower(),
        "reward_model": {"style": "rule", "ground_truth": json.dumps(truth)},
        "extra_info": {
            "index": index,
            "split": split,
            "env_id": env_id,
            "env_kwargs": "{}",
            "env_options": json.dumps(options),
        },  # fmt: skip
    }


def _docmemo_row(index: int, split: str) -> dict[str, Any]:
    """A question over DocMemo's synthetic report: the one the env draws for seed ``index``, with its gold."""
    from envs.docmemo_synthetic import synthetic_questions
    from envs.registry import make_env

    env = make_env("DocMemo-v0")
    obs, _ = env.reset(seed=index, options=None)
    env.close()
    question = next(q for q in synthetic_questions() if q.question in obs["text"])
    truth = {"answer": question.answer, "answer_format": question.answer_format,
             "evidence_pages": list(question.evidence_pages)}  # fmt: skip
    return _row("DocMemo-v0", index, split, "synthetic_docmemo", truth, None)


def _memora_row(index: int, split: str) -> dict[str, Any]:
    """A query of MEMORA's synthetic domain (in stream order), its qrels as the ground truth."""
    from envs.memora_corpus import synthetic_collection

    domain = synthetic_collection(0)[0]
    query = domain.queries[index % len(domain.queries)]
    options = {"query_id": query["id"], "query": query["query"], "qrels": query["qrels"],
               "excluded_ids": query["excluded_ids"], "domain": domain.name}  # fmt: skip
    truth = {"qrels": query["qrels"], "excluded_ids": query["excluded_ids"]}
    return _row("MEMORA-v0", index, split, "synthetic_memora", truth, options)


_STREAMS = {"DocMemo-v0": _docmemo_row, "MEMORA-v0": _memora_row}
