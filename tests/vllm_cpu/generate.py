"""Greedy generation with vLLM's CPU backend from a policy folder, one image prompt; prints JSON.

Run as a script with ``ragym.rl.verl_plugin.vllm_cpu.vllm_cpu_environment`` (vLLM's engine core starts by
spawn, so this cannot run inside pytest's process): ``python tests/vllm_cpu/generate.py MODEL IMAGE.png TEXT``.
"""

from __future__ import annotations

import json
import sys


def main(model: str, image_path: str, text: str) -> None:
    from PIL import Image
    from vllm import LLM, SamplingParams

    from ragym.rl.models import load_processor

    processor = load_processor(model)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=2048,
              kv_cache_memory_bytes=256 * 2**20, limit_mm_per_prompt={"image": 1}, seed=0)  # fmt: skip
    image = Image.open(image_path).convert("RGB")
    params = SamplingParams(temperature=0.0, max_tokens=8, logprobs=0)
    (output,) = llm.generate({"prompt": prompt, "multi_modal_data": {"image": image}}, params)
    completion = output.outputs[0]
    steps = zip(completion.logprobs, completion.token_ids, strict=True)
    logprobs = [step[token].logprob for step, token in steps]
    print(json.dumps({"prompt_token_ids": list(output.prompt_token_ids), "token_ids": list(completion.token_ids),
                      "logprobs": logprobs}))  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:])
