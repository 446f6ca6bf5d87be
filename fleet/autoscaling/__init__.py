"""Autoscaling: a pure policy (policy.py) decides; signals.py gathers what it reads; apply.py acts
(docs/autoscaling.md)."""
