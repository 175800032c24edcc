"""Teacher-forced probe of an R3G demo policy's judge decisions on held-out rows.

    python -m ragym.rl.demo.r3g --out runs/r3g_demo_s0 --seed 0
    python benchmarks/r3g_decision_probe.py runs/r3g_demo_s0 runs/r3g_demo_s0/warm_start [--rows 24]

Replays the noiseless expert (``ragym.envs.r3g.expert.R3GExpert``, noise 0) on the first ``--rows`` held-out rows and
prints, per expert token, the policy's mean probability of it: ``word:visible`` (gold image) and
``word:hidden`` (look-alike) after ``]``, ``a=:1`` and ``a=:0`` after ``a=``. A policy that reads the
captions has ``word:*`` near 1; a decision conditioned on the word has ``a=:1`` near 1 and ``a=:0`` near
1 - noise; ``a=:1`` + ``a=:0`` near 1 means the decision ignores the word. Greedy Recall@1 beats MRAG only
once ``a=:0`` passes 0.5 (share > 0.5 is the share of rows where greedy decoding writes the expert's token).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ragym.envs.r3g.expert import DECISION_TOKEN, R3GExpert  # noqa: E402
from ragym.rl.agent_loop.loop import make_agent_loop  # noqa: E402
from ragym.rl.core.grpo import response_log_probs  # noqa: E402
from ragym.rl.core.vision import ImageInputs  # noqa: E402
from ragym.rl.demo.r3g import RECIPE  # noqa: E402
from ragym.rl.engine.trainer import read_rows  # noqa: E402
from ragym.rl.models import load_policy  # noqa: E402
from ragym.rl.recipe.compose import load_recipe  # noqa: E402
from ragym.rl.tiny.warm_start import ReplayServer, _replay  # noqa: E402


def probe(out: Path, model_dir: str, num_rows: int) -> dict[str, list[float]]:
    """The policy's probability of each expert word / decision token, keyed ``word:<tok>`` or ``a=:<tok>``."""
    task = out / "task" / "data"
    config = load_recipe(
        RECIPE,
        [
            f"data.train_files={task}/train.parquet",
            f"data.val_files={task}/test.parquet",
            f"actor_rollout_ref.model.path={model_dir}",
        ],
    )
    asyncio.set_event_loop(asyncio.new_event_loop())
    model, tokenizer, processor = load_policy(model_dir)
    model.eval()
    server = ReplayServer(tokenizer)
    agent_loop = make_agent_loop(config, server, tokenizer, processor)
    images = ImageInputs(processor.image_processor)
    after = {
        tokenizer.convert_tokens_to_ids("]"): "word",
        tokenizer.convert_tokens_to_ids(DECISION_TOKEN): "a=",
    }
    stats: dict[str, list[float]] = {}
    rng = np.random.default_rng(0)
    for row in read_rows(str(task / "test.parquet"), num_rows):
        sample = _replay(row, R3GExpert.for_row(row, rng, 0.0), server, agent_loop)
        with torch.no_grad():
            log_prob, _ = response_log_probs(
                model, images, [sample], len(sample.response_ids), temperature=1.0
            )
        previous = sample.prompt_ids[-1:] + sample.response_ids[:-1]
        for i, (prev, token) in enumerate(zip(previous, sample.response_ids, strict=True)):
            if sample.response_mask[i] and prev in after:
                key = f"{after[prev]}:{tokenizer.decode([token]).strip()}"
                stats.setdefault(key, []).append(float(log_prob[0, i].exp()))
    return stats


def main() -> None:
    """Print the probe's table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the demo's --out folder (its task/ is read)")
    parser.add_argument("model", help="policy folder: OUT/warm_start or OUT/checkpoint")
    parser.add_argument("--rows", type=int, default=24, help="held-out rows replayed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for key, values in sorted(probe(args.out, args.model, args.rows).items()):
        p = np.array(values)
        print(f"{key}: n={len(p)} mean P(expert token)={p.mean():.3f} share>0.5={np.mean(p > 0.5):.2f}")


if __name__ == "__main__":
    main()
