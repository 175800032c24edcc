"""DocMemo's hooks (``ragym.envs.hooks``): a one-turn expert, toy rows over the synthetic report, the longest
episode (every candidate read in every round), the paper recipe. This module may import the layers above
``envs``; only the registry loads it, by name."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from ragym.envs.core import MAX_TURN_CHARS
from ragym.envs.docmemo.actions import NOT_ANSWERABLE, Answer, Refine, Select, format_action, parse_action
from ragym.envs.hooks import EnvHooks, SearchProbe, ServedFolder
from ragym.envs.scripted import OneTurn, run_episode


def expert(env: Any, seed: int) -> Any:
    """Declares the question not answerable at once: playing on needs reading the pages."""
    return OneTurn(format_action(Answer(NOT_ANSWERABLE, True), "not in the summaries"))


def toy_rows(out: Path) -> None:
    """Questions over DocMemo's synthetic report, one per question length (the env draws the question from the
    seed; the seeds kept are the first to draw each length): a toy batch whose trajectories all have the same
    length makes TransferQueue build a malformed nested tensor of position ids (verl 0.9.1, TransferQueue
    0.1.11), and the synthetic report's ten questions share lengths. Answers are scored by MMLongBench-Doc's
    rules (``data_source: mmlongbench_doc``), whose annotation format the synthetic questions follow."""
    from ragym.data_prep.toy_data import toy_row, write_splits
    from ragym.envs.docmemo.synthetic import synthetic_questions
    from ragym.envs.registry import make_env

    env = make_env("DocMemo-v0")
    splits: dict[str, list[dict[str, Any]]] = {}
    for split, first_seed in (("train", 0), ("test", 1000)):
        by_length: dict[int, dict[str, Any]] = {}
        for seed in range(first_seed, first_seed + 200):
            obs, _ = env.reset(seed=seed, options=None)
            question = next(q for q in synthetic_questions() if q.question in obs["text"])
            if len(question.question) not in by_length:
                truth = {
                    "answer": question.answer,
                    "answer_format": question.answer_format,
                    "evidence_pages": list(question.evidence_pages),
                }
                by_length[len(question.question)] = toy_row(
                    "DocMemo-v0", seed, split, "mmlongbench_doc", truth, None
                )
        splits[split] = list(by_length.values())
    env.close()
    write_splits(out / "data", splits)


class LongestDocMemo:
    """Selects every candidate each round and refines, marking the evidence read useful; answers in the last."""

    _CANDIDATE = re.compile(r"^\s*\[p(\d+)\]", re.MULTILINE)
    _EVIDENCE = re.compile(r"^Page (\d+) \(", re.MULTILINE)

    def __init__(self, env: Any) -> None:
        self.env = env

    def reset(self, obs: dict[str, Any]) -> None:
        """Remember the question (each refinement searches it again, worded as a new query)."""
        self.question = obs["text"].split("\n", 1)[0].removeprefix("Question: ")
        self.round = 0

    def act(self, obs_text: str) -> str:
        """Select all candidates, then refine (or answer in the last round)."""
        candidates = tuple(int(p) for p in self._CANDIDATE.findall(obs_text))
        if candidates and "Select pages to read" in obs_text:
            return format_action(Select(candidates), "read every candidate")
        if obs_text.startswith("Evidence pages") and "last round" not in obs_text:
            self.round += 1
            useful = tuple(int(p) for p in self._EVIDENCE.findall(obs_text))
            query = f"{self.question} (more evidence, round {self.round + 1})"
            note = "the pages read so far answer part of it"
            return format_action(Refine(query, note, useful, ()), "part of the answer is still missing")
        if obs_text.startswith("Retrieval is unavailable"):
            return format_action(Refine(self.question, "", (), ()), "search again")
        return format_action(Answer("unknown", False), "the evidence read answers it")


def longest_episode(env: Any, options: dict[str, Any] | None, seed: int) -> None:
    """Every round selects all candidates (E new evidence pages) and refines, the last one answers: T rounds,
    E x T pages."""
    run_episode(env, LongestDocMemo(env), seed, options)


def served_pages(root: Path, spec: Any) -> dict[str, Any]:
    """``ragym serve --doc-store-root``: page search (``pages/<doc_key>``) over each document store under
    ``root``."""
    from ragym.envs.docmemo.pages import PageRetriever
    from ragym.envs.docmemo.store import load_store
    from ragym.envs.retrieval.page_encoders import TextPageEncoder
    from ragym.envs.retrieval.service.app import Served

    folders = sorted(p.parent for p in root.glob("*/meta.json"))
    if not folders:
        raise FileNotFoundError(f"no DocMemo document stores under {root} (no */meta.json)")
    encoder = TextPageEncoder()
    return {
        f"pages/{folder.name}": Served(PageRetriever(load_store(folder), encoder), "text")
        for folder in folders
    }


def report_pages() -> Any:
    """The synthetic report's in-process page search, under the name DocMemo asks for it by."""
    from ragym.envs.registry import make_env
    from ragym.envs.retrieval.hits import NamedRetrievers

    env: Any = make_env("DocMemo-v0")  # the DocMemo env itself (make_env's type is gymnasium's Env)
    env.reset(seed=0)
    return NamedRetrievers({"pages/synthetic_annual_report": env.retriever})


HOOKS = EnvHooks(
    name="docmemo",
    format_action=format_action,
    parse_action=functools.partial(parse_action, max_chars=MAX_TURN_CHARS),
    example_actions=(
        Select((3, 7)),
        Refine("revenue in 2021", "the table is on a later page", (3,), (7, 9)),
        Refine("revenue", "", (), ()),
        Answer("42 million", False),
        Answer(NOT_ANSWERABLE, True),
    ),
    expert=expert,
    toy_rows=toy_rows,
    toy_prompt_length=1536,  # DocMemo's toy prompts reach 1,268 tokens
    longest_episode=longest_episode,
    paper_recipe="docmemo_qwen2_5_vl_7b",
    services=(
        ServedFolder("doc-store-root", "folder of DocMemo document stores (page search)", served_pages),
    ),
    # No turns: reset searches round 0's pages.
    search_probe=SearchProbe(report_pages, (), "pages/synthetic_annual_report"),
)
