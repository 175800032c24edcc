"""Cluster submission: `ragym submit` / `ragym jobs` through `ray job submit`."""
