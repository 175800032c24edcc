"""The Hugging Face answer-equivalence path for E-VQA, on a tiny random BERT saved to disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.rewards import score_answer
from ragym.rewards.evqa import load_equivalence


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("tiny_bem")
    words = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "alps",
        "pyrenees",
        "andes",
        "which",
        "mountains",
        "the",
    ]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    config = transformers.BertConfig(
        vocab_size=len(words),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=2,
    )
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def test_equivalence_model_scores_a_probability_and_gates_at_one_half(tiny_model_dir: Path) -> None:
    equivalence = load_equivalence(str(tiny_model_dir))
    assert load_equivalence(str(tiny_model_dir)) is equivalence  # loaded once per process
    probability = equivalence("which mountains", "Pyrenees", "Andes")
    assert 0.0 <= probability <= 1.0
    gt = {"answer": "Pyrenees", "question_type": "automatic", "question": "which mountains"}
    assert score_answer("evqa", "Andes", gt, equivalence=equivalence) == float(probability >= 0.5)
    assert score_answer("evqa", "the Pyrenees", gt, equivalence=equivalence) == 1.0


def test_outcome_reward_takes_the_model_path_from_the_recipe(tiny_model_dir: Path) -> None:
    from ragym.rewards import Episode, Rubric

    gt = {"answer": "Pyrenees", "question_type": "automatic", "question": "which mountains"}
    ep = Episode("evqa", ["t"], [{"type": "answer", "turn": 0, "text": "Andes", "forced": False}], gt)
    rubric = Rubric.from_recipe(
        {"terms": {"outcome": {"weight": 1.0, "params": {"bem_model_path": str(tiny_model_dir)}}}}
    )
    expected = float(load_equivalence(str(tiny_model_dir))("which mountains", "Pyrenees", "Andes") >= 0.5)
    assert rubric.score(ep).breakdown["outcome"] == expected
