"""`celery worker -B` with the fleet's health and autoscale passes every `--pass-seconds` (autoscaling benchmark).

    python -m bench._worker_proc --pass-seconds 1 --concurrency 3 --schedule FILE -l WARNING

The benchmark compresses time (docs/benchmarks.md): windows, cooldowns and the cold start run ~20×
faster than in production, so the passes that feed the autoscaler must run faster too, or a one-minute
spike would be judged on a handful of samples. Everything else is the real worker and the real beat
schedule (`CELERY_BEAT_SCHEDULE`), with only these two entries' interval and expiry changed.
"""
from __future__ import annotations

import argparse
import os
import sys

PASSES = ("fleet-health-check", "fleet-autoscale")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._worker_proc")
    parser.add_argument("--pass-seconds", type=float, required=True)
    args, rest = parser.parse_known_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from django.conf import settings

    from controlplane.celery import app

    schedule = dict(settings.CELERY_BEAT_SCHEDULE)
    for name in PASSES:  # every periodic task expires before its next run is due (CONVENTIONS, rule 5)
        schedule[name] = {**schedule[name], "schedule": args.pass_seconds,
                          "options": {**schedule[name].get("options", {}), "expires": args.pass_seconds * 0.8}}
    app.conf.beat_schedule = schedule
    app.worker_main(["worker", "-B", *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
