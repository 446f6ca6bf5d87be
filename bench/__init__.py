"""Benchmarks: `python -m bench` (or `make bench`) runs every module's `main()`; each prints a table
comparing against a baseline measured in the same run. Benchmarks are not tests."""
