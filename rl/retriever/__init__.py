"""MEMORA-R: the reasoning-aware dense retriever (seed 000, section 3.2) on sentence-transformers.

``config`` holds the recipe, ``data`` the training/eval tables, ``augment`` the [r; q] query collator,
``train`` the trainer wiring, ``evaluate`` nDCG/Recall, ``export`` the model + faiss index, ``ablation``
the paper's Table 4.
"""
