"""The longest prompt of a recipe's rows, counted as ``ragym budget`` counts it.

Each row's env is built as the agent loop builds it (``ragym.rl.budget.report.RowEpisodes``) and reset; its system
prompt and task observation (text and images) are counted with the recipe's tokenizer (or characters / 3.5,
labelled estimated) and the processor's resize rule. Nothing is played: the prompt is what the agent loop sends
first, and the part of an episode that only the rows decide. ``ragym submit`` compares it with
``data.max_prompt_length`` before a job leaves (``ragym.rl.cluster.sizes``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

logger = logging.getLogger(__name__)

PROMPT_SAMPLE = 64
"""Rows whose prompts ``ragym submit`` counts: a seeded sample, so a submission stays quick (each row's env is
reset; the KB an env reads is loaded once)."""
DATA_KEYS = ("data.train_files", "data.val_files")
"""The recipe's rows: verl reads both, and validation rolls out the same way."""


@dataclass(frozen=True)
class LongestPrompt:
    """The longest prompt found, and what it was measured on."""

    tokens: int
    """Prompt tokens (text and visual) of the longest row."""
    index: Any
    """That row's ``extra_info.index``."""
    num_rows: int
    """Rows measured."""
    files: tuple[str, ...]
    """The rows' files."""
    text: str
    """How text was counted (tokenizer, or ESTIMATED)."""

    def describe(self) -> str:
        """Where the number comes from, for messages."""
        return (
            f"row {self.index}, the longest of {self.num_rows} rows sampled from {', '.join(self.files)}; "
            f"{self.text}"
        )


def recipe_data_files(config: DictConfig, root: Path) -> list[Path]:
    """The recipe's train and validation files (each once), relative paths resolved against ``root`` (the job's
    working dir)."""
    files: list[Path] = []
    for key in DATA_KEYS:
        value = OmegaConf.select(config, key, default=None)
        names = (
            list(value) if isinstance(value, ListConfig | list | tuple) else [] if value is None else [value]
        )
        files += [path if path.is_absolute() else root / path for path in map(Path, map(str, names))]
    return list(dict.fromkeys(files))


def longest_prompt(
    config: DictConfig, files: Sequence[Path], sample: int = PROMPT_SAMPLE, seed: int = 0
) -> LongestPrompt:
    """The longest prompt among a seeded sample of ``sample`` rows of ``files`` at the recipe's settings."""
    from ragym.rl.budget.cli import text_counter
    from ragym.rl.budget.report import RowEpisodes
    from ragym.rl.budget.tokens import pixel_rule
    from ragym.rl.data.rows import DataError, load_rows

    text, source, model_dir = text_counter(config, None, estimate=True)
    rows = load_rows([str(f) for f in files], -1, "skip", check_reset=False).rows
    if len(rows) > sample:
        keep = np.sort(np.random.default_rng(seed).choice(len(rows), size=sample, replace=False))
        rows = [rows[i] for i in keep]
    logger.info("counting the prompts of %d rows of %s", len(rows), ", ".join(map(str, files)))
    pixels, runner, measured = pixel_rule(config, model_dir), RowEpisodes(config), []
    try:
        for row in rows:
            try:
                measured.append(runner.measure_prompt(row, text, pixels))
            except Exception as err:  # noqa: BLE001 - a row that cannot start is the row check's to report
                logger.warning("prompt of row %s not counted: %s", row["extra_info"].get("index"), err)
    finally:
        runner.close()
    if not measured:
        raise DataError(f"no row of {', '.join(map(str, files))} could start an episode")
    longest = max(measured, key=lambda episode: episode.prompt)
    return LongestPrompt(
        longest.prompt, longest.index, len(measured), tuple(map(str, files)), text.describe(source)
    )
