"""Output sinks: samples Parquet, the rejects report, trainer formats."""
