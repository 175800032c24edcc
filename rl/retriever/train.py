"""Wire a MEMORA-R recipe onto sentence-transformers' trainer, losses and training arguments.

Everything distributed (torchrun DDP, DeepSpeed), mixed precision, logging and progress comes from
``SentenceTransformerTrainer`` (a Hugging Face ``Trainer``); ragym only supplies the data, the [r; q]
collator and the recipe translation.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from datasets import Dataset
from sentence_transformers import (
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
)
from sentence_transformers.sentence_transformer.losses import (
    CachedMultipleNegativesRankingLoss,
    MultipleNegativesRankingLoss,
)
from sentence_transformers.sentence_transformer.training_args import BatchSamplers
from torch import nn

from ragym.rl.retriever.augment import ANCHOR_COLUMN, ReasoningQueryCollator
from ragym.rl.retriever.config import (
    LOSSES,
    LossConfig,
    ModelConfig,
    RetrieverRecipe,
    TrainConfig,
    resolve_model_path,
)
from ragym.rl.retriever.data import build_train_dataset, load_corpus, read_rows

logger = logging.getLogger(__name__)


def load_encoder(config: ModelConfig, device: str | None = None) -> SentenceTransformer:
    """The backbone as a SentenceTransformer (plain HF encoders get mean pooling added by the loader)."""
    model = SentenceTransformer(
        resolve_model_path(config.name_or_path), device=device, trust_remote_code=config.trust_remote_code
    )
    model.max_seq_length = config.max_seq_length
    return model


def build_loss(model: SentenceTransformer, config: LossConfig) -> nn.Module:
    """In-batch + hard-negative InfoNCE; the cached variant gives the same loss with bounded memory."""
    if config.name == "mnrl":
        return MultipleNegativesRankingLoss(
            model, scale=config.scale, gather_across_devices=config.gather_across_devices
        )
    if config.name == "cached_mnrl":
        return CachedMultipleNegativesRankingLoss(
            model,
            scale=config.scale,
            mini_batch_size=config.mini_batch_size,
            gather_across_devices=config.gather_across_devices,
        )
    raise ValueError(f"loss.name must be one of {LOSSES}, got {config.name!r}")


def build_training_args(
    config: TrainConfig, query_prompt: str | None
) -> SentenceTransformerTrainingArguments:
    """sentence-transformers training arguments for the recipe's ``train`` section."""
    if "wandb" in config.report_to and not os.environ.get("WANDB_API_KEY"):
        # No key means no server: keep the run on disk (``wandb sync`` later) instead of failing.
        os.environ.setdefault("WANDB_MODE", "offline")
    return SentenceTransformerTrainingArguments(
        output_dir=config.output_dir,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        num_train_epochs=config.num_epochs,
        max_steps=config.max_steps,
        # A float below 1 is a share of the schedule (transformers 5 retired warmup_ratio).
        warmup_steps=config.warmup_ratio,
        weight_decay=config.weight_decay,
        bf16=config.bf16,
        gradient_checkpointing=config.gradient_checkpointing,
        seed=config.seed,
        logging_steps=config.logging_steps,
        save_strategy="steps" if config.save_steps > 0 else "no",
        save_steps=config.save_steps or 500,
        report_to=list(config.report_to) or "none",
        run_name=config.run_name,
        deepspeed=config.deepspeed,
        dataloader_num_workers=config.dataloader_num_workers,
        disable_tqdm=not config.show_progress,
        # Duplicate texts inside a batch would be scored as each other's negatives.
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        prompts={ANCHOR_COLUMN: query_prompt} if query_prompt else None,
    )


def build_trainer(
    recipe: RetrieverRecipe, model: SentenceTransformer, dataset: Dataset
) -> SentenceTransformerTrainer:
    """A SentenceTransformerTrainer with the recipe's loss, arguments and the [r; q] collator."""
    args = build_training_args(recipe.train, recipe.model.query_prompt)
    collator = ReasoningQueryCollator(
        preprocess_fn=model.preprocess,
        prompts=args.prompts,
        separator=recipe.augment.separator,
        drop_rate=recipe.augment.drop_rate,
        # Each DDP rank draws its own drop decisions.
        seed=recipe.augment.seed + int(os.environ.get("RANK", "0")),
    )
    return SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        loss=build_loss(model, recipe.loss),
        data_collator=collator,
    )


def training_dataset(recipe: RetrieverRecipe) -> Dataset:
    """The recipe's training pairs with their mined negatives and, when augmenting, their annotations."""
    data_dir = Path(recipe.data.data_dir)
    rows = read_rows(data_dir / "train.jsonl")[: recipe.data.limit]
    if not rows:
        raise ValueError(f"{data_dir / 'train.jsonl'}: no training pairs")
    return build_train_dataset(
        rows,
        load_corpus(data_dir),
        recipe.data.num_hard_negatives,
        with_reasoning=recipe.augment.use_reasoning,
        source=str(data_dir / "train.jsonl"),
    )


def train_retriever(recipe: RetrieverRecipe, model: SentenceTransformer | None = None) -> SentenceTransformer:
    """Train the encoder per ``recipe`` and save it to ``<output_dir>/model``; returns the trained model."""
    model = model or load_encoder(recipe.model)
    dataset = training_dataset(recipe)
    logger.info("training on %d pairs, columns %s", len(dataset), dataset.column_names)
    trainer = build_trainer(recipe, model, dataset)
    trainer.train()
    if trainer.is_world_process_zero():
        model.save(str(Path(recipe.train.output_dir) / "model"))
    return model
