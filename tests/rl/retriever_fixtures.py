"""A tiny Skeptics-format pair set and its prepared folder, shared by the retriever tests."""

from __future__ import annotations

import json
from pathlib import Path

from ragym.data_prep.annotators import OfflineAnnotator
from ragym.data_prep.stackexchange import PrepConfig, prepare

TOPICS = [
    (
        "Does vitamin C prevent the common cold?",
        "Trials of vitamin C supplements show no reduction in cold incidence.",
    ),
    (
        "Is cracking your knuckles bad for arthritis?",
        "Knuckle cracking releases gas bubbles; studies find no arthritis link.",
    ),
    (
        "Do we only use ten percent of our brains?",
        "Brain imaging shows activity across nearly all regions over a day.",
    ),
    (
        "Does sugar make children hyperactive?",
        "Double-blind studies found sugar does not change child behaviour.",
    ),
    (
        "Can lightning strike the same place twice?",
        "Tall towers like the Empire State Building are struck many times a year.",
    ),
    ("Do goldfish have a three second memory?", "Goldfish learn feeding times and remember them for months."),
    (
        "Is the Great Wall of China visible from space?",
        "Astronauts report the wall is too narrow to see from orbit.",
    ),
    (
        "Does shaving make hair grow back thicker?",
        "Shaving cuts hair at the surface and does not change follicle growth.",
    ),
    (
        "Do bulls get angry at the colour red?",
        "Bulls are red-green colour blind and react to the cape's motion.",
    ),
    (
        "Does reading in dim light damage eyesight?",
        "Dim light causes eye strain but no lasting damage to vision.",
    ),
    ("Do carrots improve night vision?", "Carrot vision claims began as wartime propaganda about radar."),
    ("Is it dangerous to wake a sleepwalker?", "Waking a sleepwalker may confuse them but is not harmful."),
    (
        "Does cold weather cause colds?",
        "Colds are caused by viruses; cold exposure alone does not infect you.",
    ),
    ("Do vaccines cause autism?", "Large cohort studies find no association between vaccines and autism."),
    ("Does hair keep growing after death?", "Skin retracts after death, which makes hair look longer."),
    (
        "Is chewing gum digested after seven years?",
        "Gum base passes through the gut within days like other fibre.",
    ),
]


def write_pairs_jsonl(path: Path, num: int = len(TOPICS)) -> Path:
    """A Skeptics-format jsonl with ``num`` hand-written pairs (question ids 100.., answer ids 500..)."""
    with path.open("w", encoding="utf-8") as f:
        for i, (question, answer) in enumerate(TOPICS[:num]):
            row = {
                "question": question,
                "questionId": str(100 + i),
                "answer": answer,
                "answerId": str(500 + i),
            }
            f.write(json.dumps({**row, "category": "misc", "categoryId": 0}) + "\n")
    return path


def prepared_dir(tmp: Path, num_negatives: int = 1) -> Path:
    """``tmp/data`` prepared from the tiny pairs with offline annotations and a 25% held-out split."""
    prepare(
        write_pairs_jsonl(tmp / "pairs.jsonl"),
        tmp / "data",
        OfflineAnnotator(),
        PrepConfig(0.25, num_negatives),
    )
    return tmp / "data"
