"""CPU cost of a CPU vLLM engine's start-up and first request with torch's compiler on and off.

``ragym.rl.verl_plugin.vllm_cpu.vllm_cpu_environment`` sets ``TORCHDYNAMO_DISABLE=1`` for a CPU vLLM run: the
recipe's ``enforce_eager`` keeps vLLM from compiling the model, but vLLM's sampler, log-prob and embedding helpers
are ``torch.compile``'d whatever it says, and on CPU their first call builds C++ kernels with inductor. This script
runs ``tests/vllm_cpu/generate.py`` (a vLLM engine on a tiny Qwen2.5-VL policy, one two-image prompt, sampled and
reloaded as the CPU weight sync does) in fresh processes, alternating the two settings for ``--rounds`` rounds:
``compile`` (the variable removed) and ``eager`` (the variable set). Each window gets its own empty inductor
cache (``TORCHINDUCTOR_CACHE_DIR``) unless ``--warm-cache``, where both share one filled beforehand. Every window
prints its process tree's CPU seconds (``RUSAGE_CHILDREN``) and whether its sampled tokens equal the first
window's.

Needs vLLM's CPU backend (``make vllm-cpu``). Usage: ``python benchmarks/vllm_cpu_compile.py [--out DIR]
[--rounds 2] [--warm-cache]``. Last line: ``ratio=<compile CPU seconds / eager CPU seconds>`` (means over rounds;
> 1: the eager setting is cheaper).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.vllm_cpu import generate  # noqa: E402 - the repository on the path first

SETTINGS = ("compile", "eager")
"""``compile``: ``TORCHDYNAMO_DISABLE`` removed from the window's environment; ``eager``: set to 1."""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def inputs(out: Path) -> tuple[Path, list[Path], Path]:
    """A tiny policy, two photographs and a second policy to reload, built in ``out`` once."""
    import numpy as np
    from PIL import Image
    from skimage import data

    from ragym.rl.tiny.policy import build_tiny_policy

    first, synced = out / "policy", out / "synced"
    if not (first / "config.json").exists():
        build_tiny_policy("qwen2_5_vl", first, seed=0)
    if not (synced / "config.json").exists():
        build_tiny_policy("qwen2_5_vl", synced, seed=1)
    images = []
    for name in ("astronaut", "coffee"):
        path = out / f"{name}.png"
        if not path.exists():
            Image.fromarray(np.asarray(getattr(data, name)())).resize((96, 96)).save(path)
        images.append(path)
    return first, images, synced


def window(
    setting: str, cache: Path, model: Path, images: list[Path], synced: Path, out: Path
) -> tuple[float, list]:
    """One fresh process under ``setting``; its process tree's CPU seconds and its sampled tokens."""
    from ragym.rl.verl_plugin.vllm_cpu import vllm_cpu_environment

    env = {key: value for key, value in os.environ.items() if key != "TORCHDYNAMO_DISABLE"}
    env = vllm_cpu_environment(env)
    if setting == "compile":
        env.pop("TORCHDYNAMO_DISABLE")
    env.update({"TORCHINDUCTOR_CACHE_DIR": str(cache), "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"})
    result = out / f"{setting}.json"
    before = children_cpu()
    done = subprocess.run(
        generate.command(model, synced, images, result), env=env, capture_output=True, text=True, check=False
    )
    seconds = children_cpu() - before
    if done.returncode != 0:
        raise SystemExit(f"{setting}: generate.py failed:\n{done.stderr[-3000:]}")
    return seconds, json.loads(result.read_text())["token_ids"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="where the inputs go (default: a temporary folder)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm-cache", action="store_true", help="one inductor cache, filled first, for all")
    args = parser.parse_args()
    from ragym.rl.verl_plugin.vllm_cpu import vllm_cpu_refusal

    refusal = vllm_cpu_refusal()
    if refusal:
        raise SystemExit(refusal)
    with tempfile.TemporaryDirectory(prefix="vllm-cpu-compile-") as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        model, images, synced = inputs(out)
        shared = out / "inductor-shared"
        if args.warm_cache:
            window("compile", shared, model, images, synced, out)
        seconds: dict[str, list[float]] = {setting: [] for setting in SETTINGS}
        reference = None
        for round_ in range(args.rounds):
            for setting in SETTINGS:
                cache = shared if args.warm_cache else out / f"inductor-{setting}-{round_}"
                cpu, tokens = window(setting, cache, model, images, synced, out)
                reference = tokens if reference is None else reference
                seconds[setting].append(cpu)
                print(
                    f"round {round_} {setting}: {cpu:.1f} s CPU, tokens equal to the first window's: "
                    f"{tokens == reference}",
                    flush=True,
                )
        means = {setting: sum(values) / len(values) for setting, values in seconds.items()}
        print(
            f"mean CPU s ({'warm' if args.warm_cache else 'fresh'} inductor cache): "
            + ", ".join(f"{setting} {value:.1f}" for setting, value in means.items())
        )
        print(f"ratio={means['compile'] / means['eager']:.2f}")


if __name__ == "__main__":
    main()
