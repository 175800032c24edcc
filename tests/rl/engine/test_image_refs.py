"""The local engine's batch holds its images by reference (issue #38 item 5): a step's episodes, what the
rollout-ahead queue and the update take, pickle to no pixel bytes; the references resolve to the pixels the agent
loop showed, and the update's log-probs are those of the pixels themselves."""

from __future__ import annotations

import torch
from PIL import Image

from ragym.envs.image_ref import ImageRef, pickled_image_bytes
from ragym.rl.core.grpo import Sample, response_log_probs
from ragym.rl.core.vision import ImageInputs
from ragym.rl.recipe.images import recipe_processor_kwargs
from ragym.rl.train import build_trainer
from tests.rl.engine.test_engine_trainer import _overrides, tiny_setup  # noqa: F401

REF_BYTES = 400
"""Most bytes one pickled reference may take (a digest, a size, a path and a budget: ~340 measured)."""


def test_a_steps_batch_pickles_references_not_pixels(tiny_setup, tmp_path):  # noqa: F811
    trainer = build_trainer("kbvqa_tiny_cpu", _overrides(tiny_setup, tmp_path, steps=1))
    sampled, _ = trainer._sample_batch()
    results = [episode for group in sampled.groups for episode in group]
    refs = [image for r in results for image in r.output.multi_modal_data["images"]]
    assert refs and all(isinstance(ref, ImageRef) for ref in refs)
    pixel_bytes = sum(ref.nbytes for ref in refs)

    # By reference: the outputs, the samples the update takes and the extra fields (what verl's hops would
    # carry for ragym) hold no image payload; the references cost a few hundred bytes each.
    for value in ([r.output for r in results], [r.sample() for r in results], sampled):
        assert pickled_image_bytes(value)[1] == 0
    assert pickled_image_bytes([r.output.extra_fields for r in results])[1] == 0
    assert pickled_image_bytes(refs)[0] <= REF_BYTES * len(refs) < pixel_bytes

    # The same outputs with the pixels (what the batch held before): every image's bytes, at least.
    with_pixels = [_with_pixels(r.sample()) for r in results]
    assert pickled_image_bytes(with_pixels)[1] >= pixel_bytes

    # The update sees the same pixels either way: equal log-probs, each path preprocessing its own images.
    length = max(len(r.output.response_ids) for r in results)
    by_ref = response_log_probs(
        trainer.model, trainer.image_inputs, [r.sample() for r in results], length, 1.0
    )[0]
    fresh = ImageInputs(trainer.processor.image_processor, recipe_processor_kwargs(trainer.config))
    by_pixels = response_log_probs(trainer.model, fresh, with_pixels, length, 1.0)[0]
    torch.testing.assert_close(by_ref, by_pixels, rtol=0, atol=0)


def _with_pixels(sample: Sample) -> Sample:
    images = [Image.fromarray(ref.resolve()) for ref in sample.images]
    return Sample(
        sample.prompt_ids, sample.response_ids, sample.response_mask, images, sample.reward, sample.uid
    )
