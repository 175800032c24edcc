"""ragym data preparation: one deterministic script per dataset, all writing verl's parquet row schema."""
