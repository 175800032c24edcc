"""``ragym ablate``: the papers' ablation tables in miniature (named grids of demo variants over seeds)."""
