#!/bin/sh
# The image's commands. Each `exec`s its process so it gets the container's signals directly
# (SIGTERM: uvicorn and the gateway finish their requests, the Celery worker finishes its tasks).
set -eu

case "${1:-console}" in
  console)
    shift || true
    # One process per pod: scale with replicas. /healthz answers probes.
    exec uvicorn controlplane.asgi:application --host 0.0.0.0 --port "${SWITCHYARD_CONSOLE_PORT:-8000}" \
      --no-access-log --timeout-graceful-shutdown 20 "$@" ;;
  gateway)
    shift
    exec python -m gateway --host 0.0.0.0 --port "${SWITCHYARD_GATEWAY_PORT:-8001}" "$@" ;;
  worker)
    shift
    # No -B: the beat is its own single-replica process (two beats would run every task twice).
    exec celery -A controlplane worker -l "${LOG_LEVEL:-INFO}" "$@" ;;
  beat)
    shift
    exec celery -A controlplane beat -l "${LOG_LEVEL:-INFO}" "$@" ;;
  migrate)
    shift
    exec python manage.py migrate --noinput "$@" ;;
  wait-for-migrations)
    # Until the schema matches this code (the migration job of this release has run).
    # Says why while it waits (unapplied migrations, or a database it cannot reach).
    until out="$(python manage.py migrate --check 2>&1)"; do
      echo "waiting for database migrations (the release's migrate job): $(echo "$out" | tail -n 1)"
      sleep 5
    done ;;
  worker-alive)
    # Liveness of this pod's worker: it answers a ping through the broker.
    exec celery -A controlplane inspect ping --timeout 10 --destination "celery@$(hostname)" ;;
  manage)
    shift
    exec python manage.py "$@" ;;
  *)
    exec "$@" ;;
esac
