"""Readers of native formats (agent trajectories, measured runs, GPU profiles) that write canonical Parquet."""
