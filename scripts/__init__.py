"""Launchers and helpers of the developer commands (`make run`: run.py)."""
