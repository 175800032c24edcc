"""A tiny sentence-transformers text encoder built from config (BERT, character vocabulary), no download.

It is a real ``SentenceTransformer`` folder (transformer + mean pooling) that ``EncoderSpec("sentence",
kwargs={"model_path": ...})`` loads like E5 or MiniLM; the benchmark and the Ray test run the encoding step's
torch path on it.
"""

from __future__ import annotations

import string
from pathlib import Path

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CHARS = string.ascii_lowercase + string.digits + string.punctuation


def build_tiny_text_encoder(
    out: Path, hidden: int = 128, layers: int = 2, heads: int = 2, max_seq_length: int = 128, seed: int = 0
) -> Path:
    """Write a randomly initialised ``hidden``-wide BERT sentence encoder to ``out``; returns ``out``."""
    import torch

    # models: sentence-transformers 6 serves it from a lazy alias that static tools cannot see (3.x has the
    # module). BertTokenizer is the fast (tokenizers) class since transformers 5.
    from sentence_transformers import SentenceTransformer, models  # pyright: ignore[reportAttributeAccessIssue]
    from transformers import BertConfig, BertModel, BertTokenizer

    hf = out / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    vocab = [*SPECIAL, *CHARS, *(f"##{c}" for c in CHARS)]
    (hf / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizer(vocab_file=str(hf / "vocab.txt"), do_lower_case=True).save_pretrained(str(hf))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=max_seq_length + 2,
    )
    BertModel(config).eval().save_pretrained(str(hf))
    transformer = models.Transformer(str(hf), max_seq_length=max_seq_length)
    pooling = models.Pooling(transformer.get_embedding_dimension(), "mean")
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(out))
    return out
