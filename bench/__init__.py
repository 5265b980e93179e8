"""Benchmarks. Run them as scripts (``python bench/read_path.py``); see ``bench/README.md``."""
