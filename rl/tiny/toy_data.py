"""Toy training rows for every environment, from its built-in synthetic data, in verl's row schema.

``ragym train --engine verl --toy DIR`` trains any shipped recipe on these (with a tiny policy), so the whole
cluster path (verl's trainer, the agent loop, the env, the reward recipe) runs on a laptop in minutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ragym.data_prep.rows import verl_row

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
"""MEMORA rows per split (queries of its synthetic domain, in stream order)."""
COLUMNS = ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]


def toy_rows(env_id: str, out: Path) -> Path:
    """Write ``out/data/{train,test}.parquet`` for ``env_id`` (once; reused after) and return ``out/data``."""
    data = out / "data"
    if (data / "test.parquet").is_file():
        return data
    if env_id == "KBVQA-v0":
        from ragym.data_prep.synthetic_kb import main as build_kb

        if build_kb(["--out", str(out), "--preset", "tiny"]) != 0:
            raise RuntimeError(f"building the tiny synthetic KB in {out} failed")
    elif env_id == "R3G-v0":
        from ragym.data_prep.r3g_synthetic import PRESETS, build_task

        build_task(out, PRESETS["tiny"])
    elif env_id == "MEMORA-v0":
        memory = out / "memory"  # the episodic memory the train rows write and the test rows read, frozen
        _write(data, {split: [_memora_row(offset + i, split, memory) for i in range(NUM_TOY_ROWS)]
                      for split, offset in (("train", 0), ("test", NUM_TOY_ROWS))})  # fmt: skip
    elif env_id == "DocMemo-v0":
        _write(data, {split: _docmemo_rows(split) for split in ("train", "test")})
    else:
        raise ValueError(f"no toy data for {env_id}; toy data exists for {sorted(TOY_ENVS.values())}")
    return data


def _row(
    env_id: str, index: int, split: str, source: str, truth: dict, options: dict | None,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One verl row that resets ``env_id`` with ``options`` (None: the env's own synthetic draw for the seed)."""
    return verl_row(data_source=source, ability=env_id.split("-")[0].lower(), question="(the env writes the prompt)",
                    ground_truth=truth, index=index, split=split, env_id=env_id, env_kwargs=env_kwargs or {},
                    env_options=options)  # fmt: skip


def _write(data: Path, splits: dict[str, list[dict[str, Any]]]) -> None:
    data.mkdir(parents=True, exist_ok=True)
    for split, records in splits.items():
        pd.DataFrame.from_records(records, columns=COLUMNS).to_parquet(data / f"{split}.parquet")


def _docmemo_rows(split: str) -> list[dict[str, Any]]:
    """Questions over DocMemo's synthetic report, one per question length (the env draws the question from the
    seed; the seeds kept are the first to draw each length): a toy batch whose trajectories all have the same
    length makes TransferQueue build a malformed nested tensor of position ids (verl 0.9.1, TransferQueue
    0.1.11), and the synthetic report's ten questions share lengths. Answers are scored by MMLongBench-Doc's
    rules (``data_source: mmlongbench_doc``), whose annotation format the synthetic questions follow."""
    from ragym.envs.docmemo.synthetic import synthetic_questions
    from ragym.envs.registry import make_env

    env = make_env("DocMemo-v0")
    by_length: dict[int, dict[str, Any]] = {}
    first_seed = 0 if split == "train" else 1000
    for seed in range(first_seed, first_seed + 200):
        obs, _ = env.reset(seed=seed, options=None)
        question = next(q for q in synthetic_questions() if q.question in obs["text"])
        if len(question.question) not in by_length:
            truth = {"answer": question.answer, "answer_format": question.answer_format,
                     "evidence_pages": list(question.evidence_pages)}  # fmt: skip
            by_length[len(question.question)] = _row(
                "DocMemo-v0", seed, split, "mmlongbench_doc", truth, None
            )
    env.close()
    return list(by_length.values())


def _memora_row(index: int, split: str, memory: Path) -> dict[str, Any]:
    """A query of MEMORA's synthetic domain (in stream order), its qrels as the ground truth; the train rows
    write the episodic memory in ``memory``, the test rows read it frozen (as ``ragym prep bright`` splits)."""
    from ragym.envs.memora.corpus import synthetic_collection

    domain = synthetic_collection(0)[0]
    query = domain.queries[index % len(domain.queries)]
    options = {"query_id": query["id"], "query": query["query"], "qrels": query["qrels"],
               "excluded_ids": query["excluded_ids"], "domain": domain.name}  # fmt: skip
    truth = {"qrels": query["qrels"], "excluded_ids": query["excluded_ids"]}
    kwargs = {"memory_dir": str(memory.resolve()), "memory_frozen": split == "test"}
    return _row("MEMORA-v0", index, split, "synthetic_memora", truth, options, kwargs)
