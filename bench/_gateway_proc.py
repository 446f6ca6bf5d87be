"""`python -m gateway`, with the routing policy of every pool forced by name (routing benchmark).

    python -m bench._gateway_proc --port 8001 --policy round_robin

Deployments have no routing-policy field yet: the snapshot loader falls back to
`gateway.config.snapshot_loader.DEFAULT_POLICY` for every pool, so this launcher sets that name before
the gateway starts. Everything else is the real gateway (auth, limits, redaction, metering, failover).
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._gateway_proc")
    parser.add_argument("--policy", required=True)
    args, rest = parser.parse_known_args(argv)
    import django

    django.setup()
    import gateway.config.snapshot_loader as loader
    from gateway import __main__ as gateway_cli
    from gateway.routing.policies import get_policy

    get_policy(args.policy)  # an unknown name fails here, not as a warning in the gateway
    loader.DEFAULT_POLICY = args.policy
    gateway_cli.main(rest)


if __name__ == "__main__":
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    main(sys.argv[1:])
