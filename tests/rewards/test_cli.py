"""``ragym score``: scoring saved episodes offline through ``main(argv)``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.rewards import Rubric
from ragym.rewards.cli import main
from tests.rewards.synthetic import synthetic_episode

REPO = Path(__file__).resolve().parents[2]
PAPER_RECIPE = REPO / "recipes" / "rewards" / "mmagent_r2.yaml"


@pytest.fixture
def episodes_file(tmp_path: Path) -> Path:
    path = tmp_path / "episodes.jsonl"
    path.write_text("\n".join(synthetic_episode(s, num_images=1 + s % 2).to_json() for s in range(40)) + "\n")
    return path


def _row(out: str, term: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.split() and line.split()[0] == term)


def test_score_prints_the_breakdown_table(episodes_file: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--recipe", str(PAPER_RECIPE), "--episodes", str(episodes_file)]) == 0
    out = capsys.readouterr().out
    rubric = Rubric.from_recipe(PAPER_RECIPE)
    results = [rubric.score(synthetic_episode(s, num_images=1 + s % 2)) for s in range(40)]
    verification = [r.breakdown["verification"] for r in results]
    name, reward, weight, mean, count, none = _row(out, "verification")
    assert (reward, weight, count, none) == ("verification", "1", "40", "0")
    assert float(mean) == pytest.approx(sum(verification) / 40, abs=1e-4)
    assert float(_row(out, "TOTAL")[1]) == pytest.approx(sum(r.total for r in results) / 40, abs=1e-4)
    assert "40 episodes" in out


def test_none_terms_are_counted(tmp_path: Path, episodes_file: Path, capsys: pytest.CaptureFixture) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("terms:\n  format: {weight: 1.0, params: {on_truncated: skip}}\n")
    assert main(["--recipe", str(recipe), "--episodes", str(episodes_file)]) == 0
    truncated = sum(synthetic_episode(s, num_images=1 + s % 2).truncated for s in range(40))
    assert truncated > 0
    row = _row(capsys.readouterr().out, "format")
    assert (row[-2], row[-1]) == (str(40 - truncated), str(truncated))


@pytest.mark.parametrize(
    ("recipe_text", "episodes_text", "fragment"),
    [
        ("terms:\n  outcome: {weight: 1, params: {dleta: 1}}\n", None, "unknown parameter(s) ['dleta']"),
        (None, '{"data_source": "generic"}\n', "episodes.jsonl:1: not an episode"),
        (None, "not json\n", "episodes.jsonl:1: not JSON"),
    ],
)
def test_errors_name_the_culprit(
    tmp_path: Path,
    episodes_file: Path,
    capsys: pytest.CaptureFixture,
    recipe_text,
    episodes_text,
    fragment: str,
) -> None:
    recipe = PAPER_RECIPE
    if recipe_text:
        recipe = tmp_path / "bad.yaml"
        recipe.write_text(recipe_text)
    if episodes_text:
        episodes_file.write_text(episodes_text)
    assert main(["--recipe", str(recipe), "--episodes", str(episodes_file)]) == 2
    assert fragment in capsys.readouterr().err


def test_a_shipped_training_recipe_scores_from_any_directory(
    tmp_path: Path, episodes_file: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its recipe_path names the reward recipe from the repository: it was looked for beside the recipe, in recipes/.
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "--recipe",
                str(REPO / "recipes" / "kbvqa_single_gpu_smoke.yaml"),
                "--episodes",
                str(episodes_file),
            ]
        )
        == 0
    )
    assert "(mmagent_r2)" in capsys.readouterr().out
    # One whose bases hold the reward recipe says so, not that `hydra` and `trainer` are unknown reward recipe keys.
    assert (
        main(["--recipe", str(REPO / "recipes" / "kbvqa_tiny_cpu.yaml"), "--episodes", str(episodes_file)])
        == 2
    )
    assert "its bases (defaults) may set one: give that reward recipe file" in capsys.readouterr().err


def test_missing_episodes_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--recipe", str(PAPER_RECIPE), "--episodes", str(tmp_path / "none.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_ragym_dispatches_score(episodes_file: Path, capsys: pytest.CaptureFixture) -> None:
    from ragym.rl.cli import main as ragym

    assert ragym(["score", "--recipe", str(PAPER_RECIPE), "--episodes", str(episodes_file)]) == 0
    assert "TOTAL" in capsys.readouterr().out


def test_evqa_exact_match_only_is_labelled(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from ragym.rewards import Episode

    answer = {"type": "answer", "turn": 0, "text": "Alps", "forced": False}
    path = tmp_path / "evqa.jsonl"
    path.write_text(
        Episode(
            "evqa",
            ["t"],
            [answer],
            {"answer": "Alps|Pyrenees", "question_type": "templated"},
            env_id="KBVQA-v0",
        ).to_json()
    )
    assert main(["--recipe", str(PAPER_RECIPE), "--episodes", str(path)]) == 0
    out = capsys.readouterr().out
    assert "evqa=1" in out and "evqa_exact_match_only" in out
