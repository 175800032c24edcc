"""``ragym budget`` on rows over real-size photos: each shipped paper recipe's longest episode fits its lengths, a
budget raised to the model's own cap is flagged as truncation, and bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragym.rl import cli
from ragym.rl.budget.cli import load_config, main
from ragym.rl.recipe.images import recipe_images
from tests.rl.budget.fixtures import copy_rows

PAPER = {
    # recipe: (rows, (turns, images after the prompt) of its longest row's episode)
    "kbvqa_qwen2_5_vl_7b": ("kbvqa", (8, 30)),  # N = 2 images x (Rej_max + 1 = 3) batches x K = 5; T_max = 8
    "kbvqa_qwen3_vl_8b": ("kbvqa", (8, 30)),
    "r3g_qwen2_5_vl_7b": ("r3g", (4, 6)),  # plan, retrieve (P = 5), judge (k = 1), answer
    "memora_qwen2_5_vl_7b": ("memora", (13, 0)),  # decompose, 5 x (subquery, extract), judge, stop
    "docmemo_qwen2_5_vl_7b": ("docmemo", (6, 9)),  # T = 3 rounds of (select, refine / answer), E = 3 pages
}
_REPORTS: dict[str, dict] = {}


@pytest.fixture
def report_of(paper_rows, tokenizer_dir, tmp_path_factory):
    """``report_of(recipe)``: the JSON report of the recipe's rows with the test tokenizer (run once per recipe)."""

    def get(recipe: str) -> dict:
        if recipe not in _REPORTS:
            out = tmp_path_factory.mktemp("budget") / "report.json"
            rows = paper_rows(PAPER[recipe][0])
            assert (
                main(
                    [
                        "--recipe",
                        recipe,
                        "--rows",
                        str(rows),
                        "--tokenizer",
                        str(tokenizer_dir),
                        "--json",
                        str(out),
                    ]
                )
                == 0
            )
            _REPORTS[recipe] = json.loads(out.read_text())
        return _REPORTS[recipe]

    return get


@pytest.mark.parametrize("recipe", list(PAPER))
def test_the_papers_longest_episode_is_played_with_every_image_under_its_budget(recipe, report_of) -> None:
    report, budget = report_of(recipe), recipe_images(load_config(recipe, [])).budget
    longest = max(report["episodes"], key=lambda e: e["response"])
    assert (longest["turns"], longest["num_images"]) == PAPER[recipe][1]
    # Every photo is larger than its budget, so each image costs nearly its budget, never more (+ 2 markers).
    most = budget.max_tokens("candidate") + 2
    assert (
        0.8 * most * longest["num_images"] <= longest["response_obs_visual"] <= most * longest["num_images"]
    )
    num_query = 0 if recipe.startswith("docmemo") else 2 if recipe.startswith("kbvqa") else 1
    assert 0.8 * num_query * budget.max_tokens("query") <= longest["prompt_visual"]
    assert longest["prompt_visual"] <= num_query * (budget.max_tokens("query") + 2)


@pytest.mark.parametrize("recipe", PAPER)
def test_each_shipped_recipe_fits_its_papers_longest_episode(recipe, report_of) -> None:
    report, config = report_of(recipe), load_config(recipe, [])
    for episode in report["episodes"]:
        assert episode["prompt"] <= config.data.max_prompt_length
        assert episode["response"] <= config.data.max_response_length
    assert report["summary"]["truncated"] == 0


def test_the_summary_line_and_the_assumptions_are_printed(paper_rows, tokenizer_dir, capsys) -> None:
    rows = paper_rows("r3g")
    assert (
        main(["--recipe", "r3g_qwen2_5_vl_7b", "--rows", str(rows), "--tokenizer", str(tokenizer_dir)]) == 0
    )
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1].startswith("budget: 1 episodes, response p90 ") and printed[-1].endswith(
        " / 12,288, truncated 0.0%"
    )
    assumed = "\n".join(line for line in printed if "assumed:" in line)
    assert f"tokenizer at {tokenizer_dir}" in assumed and "factor 28, 3,136-802,816 pixels" in assumed
    assert "max(its scripted text, 128) tokens" in assumed


def test_a_candidate_budget_at_the_models_own_cap_is_flagged_as_truncation(paper_rows, tokenizer_dir, capsys):
    rows = paper_rows("kbvqa")
    cap = ["ragym.images.candidate_max_pixels=12845056", "data.mm_processor_kwargs.max_pixels=12845056"]
    assert (
        main(
            ["--recipe", "kbvqa_qwen2_5_vl_7b", "--rows", str(rows), "--tokenizer", str(tokenizer_dir), *cap]
        )
        == 0
    )
    # A 2400 x 1800 candidate then costs 64 x 86 = 5,504 tokens: one batch of five is over 12,288 already.
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("truncated 100.0%")


def test_the_limits_are_the_ones_the_agent_loop_applies(paper_rows, tokenizer_dir, tmp_path) -> None:
    """The agent loop cuts at ``rollout.prompt_length`` / ``response_length`` (verl's keys, which only default to
    ``data.max_*``): the report compared with ``data.max_*`` and said 0% of episodes the loop would cut."""
    rows, out = paper_rows("r3g"), tmp_path / "r.json"
    base = ["--recipe", "r3g_qwen2_5_vl_7b", "--rows", str(rows), "--tokenizer", str(tokenizer_dir)]
    limits = ["actor_rollout_ref.rollout.prompt_length=16", "actor_rollout_ref.rollout.response_length=64"]
    assert main([*base, "--json", str(out), *limits]) == 0
    summary = json.loads(out.read_text())["summary"]
    assert (summary["max_prompt_length"], summary["max_response_length"]) == (16, 64)
    assert (summary["truncated_prompt"], summary["truncated_response"], summary["truncated"]) == (1, 1, 1)


def test_the_action_allowance_counts_each_turn_at_least_n_tokens(paper_rows, tmp_path) -> None:
    rows, out = paper_rows("r3g"), tmp_path / "r.json"
    base = ["--recipe", "r3g_qwen2_5_vl_7b", "--rows", str(rows), "--estimate-text", "--json", str(out)]
    assert main([*base, "--action-tokens", "0"]) == 0
    scripted = json.loads(out.read_text())["episodes"][0]
    assert main([*base, "--action-tokens", "1000"]) == 0
    allowed = json.loads(out.read_text())
    assert (
        allowed["episodes"][0]["response_actions"] == 1000 * scripted["turns"] > scripted["response_actions"]
    )
    assert "ESTIMATED" in allowed["assumptions"][0]
    assert allowed["episodes"][0]["response_obs_visual"] == scripted["response_obs_visual"]


def run_cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    code = cli.main(["budget", *argv])
    return code, capsys.readouterr().err.strip().splitlines()


def test_bad_input_is_one_line(paper_rows, tmp_path, capsys) -> None:
    rows = paper_rows("r3g")
    code, err = run_cli(["--recipe", "no_such_recipe", "--rows", str(rows)], capsys)
    assert code == 2 and len(err) == 1 and "recipe no_such_recipe not found" in err[0]
    code, err = run_cli(["--recipe", "r3g_qwen2_5_vl_7b", "--rows", str(rows)], capsys)
    assert code == 2 and len(err) == 1 and "no tokenizer" in err[0] and "--estimate-text" in err[0]
    code, err = run_cli(
        ["--recipe", "r3g_qwen2_5_vl_7b", "--rows", str(tmp_path / "none.parquet"), "--estimate-text"], capsys
    )
    assert code == 2 and len(err) == 1 and "none.parquet not found" in err[0]
    broken = copy_rows(rows, tmp_path / "broken.parquet")
    broken.write_bytes(broken.read_bytes()[:100])
    code, err = run_cli(["--recipe", "r3g_qwen2_5_vl_7b", "--rows", str(broken), "--estimate-text"], capsys)
    assert code == 2 and len(err) == 1 and "broken.parquet is not a readable parquet file" in err[0]
    code, err = run_cli(
        ["--recipe", "r3g_qwen2_5_vl_7b", "--rows", str(rows), "--tokenizer", str(tmp_path)], capsys
    )
    assert code == 2 and len(err) == 1 and f"cannot load a tokenizer from {tmp_path}" in err[0]


def test_rows_whose_episode_cannot_run_are_listed_and_skipped(paper_rows, tmp_path, capsys) -> None:
    import pandas as pd

    frame = pd.read_parquet(paper_rows("docmemo"))
    bad = frame.iloc[[0]].copy()
    bad["extra_info"] = [
        {**bad["extra_info"].iloc[0], "env_options": json.dumps({"question": "q", "doc_id": "x.pdf"})}
    ]
    rows = tmp_path / "rows.parquet"
    pd.concat([bad, frame]).to_parquet(rows)
    assert main(["--recipe", "docmemo_qwen2_5_vl_7b", "--rows", str(rows), "--estimate-text"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1].startswith("budget: 2 episodes")
    assert any(
        "skipped 1 row(s) that could not run (first: extra_info.index 0: FileNotFoundError" in line
        for line in printed
    )


def test_prep_prints_the_report_for_the_rows_it_writes(tmp_path: Path, capsys) -> None:
    from ragym.rl.errors import UsageError
    from ragym.rl.prep import main as prep_main
    from tests.data_prep.bright_fixtures import write_mm_bright

    raw = write_mm_bright(tmp_path / "raw")
    args = ["mm-bright", "--raw", str(raw), "--domain", "academia", "--task", "2"]
    assert prep_main([*args, "--out", str(tmp_path / "a")]) == 0  # one usable row (a test row)
    printed = capsys.readouterr().out.strip().splitlines()
    assert any(
        line.startswith("budget: recipe memora_qwen2_5_vl_7b on a sample of 1 rows") for line in printed
    )
    assert any("ESTIMATED" in line for line in printed) and printed[-1].startswith("budget: 1 episodes")
    assert prep_main([*args, "--out", str(tmp_path / "b"), "--budget-recipe", "r3g_qwen2_5_vl_7b"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("budget: recipe r3g_qwen2_5_vl_7b on a sample of 1 rows") for line in printed)
    assert prep_main([*args, "--out", str(tmp_path / "c"), "--no-budget-report"]) == 0
    assert "budget:" not in capsys.readouterr().out
    with pytest.raises(UsageError, match="--budget-recipe: recipe nosuch not found"):
        prep_main([*args, "--out", str(tmp_path / "d"), "--budget-recipe", "nosuch"])
    assert not (tmp_path / "d").exists()  # refused before any prep work


def test_prep_reports_on_a_bounded_sample(paper_rows, capsys) -> None:
    from ragym.rl.budget.cli import prep_report

    report = prep_report([paper_rows("docmemo")], "docmemo_qwen2_5_vl_7b", sample=1)
    assert report["summary"]["episodes"] == 1
    assert "on a sample of 1 rows of" in capsys.readouterr().out
