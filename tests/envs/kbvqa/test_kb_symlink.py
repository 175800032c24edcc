"""A KB whose queries/ folder is a symlink: rows find their query images by any of their paths."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ragym import envs
from ragym.data_prep.synthetic_kb import PRESETS, build_kb


@pytest.mark.parametrize("form", ["relative", "through_the_link", "link_target"])
def test_query_images_are_found_through_a_symlinked_queries_folder(tmp_path, form):
    kb = build_kb(tmp_path / "kb", PRESETS["tiny"], seed=0, name="linked")
    shutil.move(str(kb / "queries"), str(tmp_path / "real_queries"))
    (kb / "queries").symlink_to(tmp_path / "real_queries")
    row = pd.read_parquet(kb / "data" / "test.parquet").iloc[0]["extra_info"]
    options = json.loads(row["env_options"])
    images = [Path(p) for p in options["query_images"]]
    options["query_images"] = {
        "relative": [str(p) for p in images],
        "through_the_link": [str(kb / p) for p in images],
        "link_target": [str(tmp_path / "real_queries" / p.relative_to("queries")) for p in images],
    }[form]
    env = envs.make_env(row["env_id"], **json.loads(row["env_kwargs"]))
    obs, info = env.reset(seed=0, options=options)
    assert len(obs["images"]) == len(images)
