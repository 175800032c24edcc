"""Sampling with vLLM's CPU backend from a policy folder, for one multi-image prompt; writes JSON
(a file: vLLM's own shutdown logs also go to standard output).

Run as a script under ``ragym.rl.verl_plugin.vllm_cpu.vllm_cpu_environment`` (vLLM's engine core starts by
spawn, so this cannot run inside pytest's process)::

    python tests/vllm_cpu/generate.py MODEL [--reload OTHER] --images A.png B.png ... --text TEXT --out OUT.json

``--reload OTHER`` loads OTHER's weights into the running engine in place, through the same layerwise reload
ragym's worker extension runs at every weight sync, before sampling.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def command(
    model: Path, reload: Path, images: list[Path], out: Path, text: str = "which candidate is it?"
) -> list[str]:
    """This script's command line: sample from ``model`` after reloading ``reload``'s weights in place, for one
    prompt of ``images``, into ``out``; run it under ``vllm_cpu_environment``."""
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        str(model),
        "--reload",
        str(reload),
        "--images",
        *map(str, images),
        "--text",
        text,
        "--out",
        str(out),
    ]


def reload_from(worker: object, folder: str) -> int:
    """In a vLLM worker: reload the weights of ``folder`` in place, as the CPU weight sync does."""
    from safetensors.torch import load_file
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

    from ragym.rl.verl_plugin.vllm_worker import end_reload

    model = worker.model_runner.model
    weights = load_file(f"{folder}/model.safetensors")
    initialize_layerwise_reload(model)
    model.load_weights(list(weights.items()))
    end_reload(model, worker.model_runner.vllm_config.model_config)
    return len(weights)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--reload")
    parser.add_argument("--images", nargs="+", required=True)
    parser.add_argument("--text", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from PIL import Image
    from vllm import LLM, SamplingParams

    from ragym.rl.models import load_processor

    content = [
        {"type": "text", "text": "Image 1:"},
        {"type": "image"},
        {"type": "text", "text": "Candidates:"},
    ]
    for rank in range(1, len(args.images)):
        content += [{"type": "text", "text": f"[{rank}]"}, {"type": "image"}]
    content.append({"type": "text", "text": args.text})
    messages = [{"role": "user", "content": content}]
    prompt = load_processor(args.model).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    llm = LLM(
        model=args.model,
        dtype="float32",
        enforce_eager=True,
        max_model_len=4096,
        kv_cache_memory_bytes=256 * 2**20,
        limit_mm_per_prompt={"image": len(args.images)},
        seed=0,
        mm_processor_kwargs={"min_pixels": 3136, "max_pixels": 200704},
    )
    if args.reload:
        llm.collective_rpc(reload_from, args=(args.reload,))
    images = [Image.open(path).convert("RGB") for path in args.images]
    params = SamplingParams(temperature=1.0, max_tokens=16, logprobs=0, seed=1)
    (output,) = llm.generate({"prompt": prompt, "multi_modal_data": {"image": images}}, params)
    completion = output.outputs[0]
    steps = zip(completion.logprobs, completion.token_ids, strict=True)
    logprobs = [step[token].logprob for step, token in steps]
    result = {
        "prompt_token_ids": list(output.prompt_token_ids),
        "token_ids": list(completion.token_ids),
        "logprobs": logprobs,
    }
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
