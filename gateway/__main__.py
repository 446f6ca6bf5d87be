"""CLI: `python -m gateway --port 8001 [--workers N]` — the /v1 gateway as its own process(es)."""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's multiprocess mode (gateway.metering.metrics)


def build_parser() -> argparse.ArgumentParser:
    from controlplane.env import env_int, env_str

    parser = argparse.ArgumentParser(prog="python -m gateway", description="Switchyard's OpenAI-compatible gateway.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8001, help="TCP port (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=env_int("SWITCHYARD_GATEWAY_WORKERS", 1, minimum=1, maximum=64),
                        help="worker processes sharing the port (default: SWITCHYARD_GATEWAY_WORKERS or 1; "
                             "one per core is the usual choice)")
    parser.add_argument("--metrics-host", default=env_str("SWITCHYARD_GATEWAY_METRICS_HOST", "127.0.0.1"),
                        help="interface of the /metrics listener (default: SWITCHYARD_GATEWAY_METRICS_HOST or "
                             "127.0.0.1, this host only)")
    parser.add_argument("--metrics-port", type=int,
                        default=env_int("SWITCHYARD_GATEWAY_METRICS_PORT", 9101, minimum=0, maximum=65535),
                        help="port of the /metrics listener (default: SWITCHYARD_GATEWAY_METRICS_PORT or 9101; "
                             "0 picks a free one, logged at start)")
    parser.add_argument("--log-level", default="warning", help="log level of the HTTP server (default: %(default)s)")
    parser.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set for workers
    parser.add_argument("--metrics-fd", type=int, help=argparse.SUPPRESS)  # the supervisor's metrics socket
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    if args.workers < 1:
        raise SystemExit("--workers must be at least 1")
    if not args.reuse_port:
        # Multiprocess mode is the supervisor's to set up, in a directory of its own: a directory
        # inherited from elsewhere (another install's) would mix its counts into ours.
        os.environ.pop(MULTIPROC_ENV, None)
    if args.workers > 1:
        raise SystemExit(supervise(args))
    serve(args)


def serve(args) -> None:
    """One gateway process: Django set up once, then `gateway.server` (uvloop, httptools).

    As a worker (`--reuse-port`) it binds its own SO_REUSEPORT socket, so the kernel spreads
    new connections evenly over the workers; with one shared socket whichever process woke
    first accepted a whole burst of connections, leaving the others idle.
    """
    import logging

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()
    from gateway.app import build_app
    from gateway.server import HttpServer
    from gateway.server.connection_share import ConnectionShare

    logging.getLogger("gateway.server").setLevel(args.log_level.upper())
    share = ConnectionShare.from_env() if args.reuse_port else None
    metrics_socket = socket.socket(fileno=args.metrics_fd) if args.metrics_fd is not None else \
        metrics_listener_socket(args.metrics_host, args.metrics_port)
    app = build_app()
    # The backlog absorbs bursts of new connections.
    server = HttpServer(app, host=args.host, port=args.port, backlog=4096, share=share, **body_limits())
    server.add_companion(metrics_server(app), [metrics_socket])
    if args.metrics_fd is None:
        host, port = metrics_socket.getsockname()[:2]
        print(f"gateway metrics on http://{host}:{port}/metrics", file=sys.stderr, flush=True)
    public = _reuse_port_socket(args.host, args.port, 4096) if args.reuse_port else \
        _listen_alone(args.host, args.port, 4096, what="", hint=PORT_HINT)
    server.run(sockets=[public])


def metrics_server(app):
    """The /metrics listener's server, for `HttpServer.add_companion` (its app: gateway.metering.exposition)."""
    from django.conf import settings

    from gateway.metering.exposition import MetricsEndpoint
    from gateway.server import HttpServer

    return HttpServer(MetricsEndpoint(app.render_metrics, settings.SWITCHYARD_METRICS_TOKEN), lifespan=False,
                      install_signals=False, graceful_timeout=5.0)


def metrics_listener_socket(host: str, port: int) -> socket.socket:
    """The /metrics listener's socket, bound once: a port another program (another install) holds stops
    the start with its number, and with `--workers` the workers share this one socket."""
    return _listen_alone(host, port, 128, what="for /metrics ",
                         hint="choose another port with --metrics-port or SWITCHYARD_GATEWAY_METRICS_PORT")


def _listen_alone(host: str, port: int, backlog: int, *, what: str, hint: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not SO_REUSEPORT: the port must be ours alone
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise SystemExit(f"gateway: cannot listen {what}on {host}:{port} ({error.strerror}); {hint}") from None
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def body_limits() -> dict:
    """The HTTP server's request-body limits from the settings (SWITCHYARD_GATEWAY_BODY_*)."""
    from django.conf import settings

    return {"body_timeout": settings.SWITCHYARD_GATEWAY_BODY_TIMEOUT,
            "body_min_rate": settings.SWITCHYARD_GATEWAY_BODY_MIN_RATE,
            "body_deadline": settings.SWITCHYARD_GATEWAY_BODY_DEADLINE}


PORT_HINT = "another program (another install's gateway?) holds it: choose another --port"


def claim_port(host: str, port: int) -> socket.socket:
    """The public port, for this start's workers alone.

    Linux lets any process of the same user join a port's SO_REUSEPORT group, and then shares new
    connections with it: a second install's `--workers` gateway on our port would take part of our
    traffic. So the supervisor first binds the port plainly (which fails while anyone listens on it,
    a group of SO_REUSEPORT workers included), then holds it with a bound, never-listening socket
    that has SO_REUSEPORT but not SO_REUSEADDR: our workers (same user, SO_REUSEPORT) may still bind
    beside it, and another install's plain check fails for as long as this start lives — even while
    every worker is down for a restart. Between the check and the hold is a window of one system call,
    accepted: both installs would have to start on one port in the same microseconds.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT of our own last start is no holder
        try:
            probe.bind((host, port))
        except OSError as error:
            raise SystemExit(f"gateway: cannot listen on {host}:{port} ({error.strerror}); {PORT_HINT}") from None
        port = probe.getsockname()[1]
    holder = socket.socket(family, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind((host, port))
    return holder


def _reuse_port_socket(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


RESTART_BACKOFF_SECONDS = (1, 2, 5, 10, 30)


def supervise(args) -> int:
    """Run `args.workers` gateway processes on one port; restart any that dies; stop all on SIGTERM/SIGINT.

    Every worker is a whole gateway (snapshot, key cache, engine connections, usage writer);
    limits and budgets stay exact across them because they are counted in Redis.
    """
    from prometheus_client.multiprocess import mark_process_dead

    from gateway.server.connection_share import ENV, create_table

    port_claim = claim_port(args.host, args.port)
    metrics_socket = metrics_listener_socket(args.metrics_host, args.metrics_port)
    argv = [sys.executable, "-m", "gateway", "--host", args.host, "--port", str(port_claim.getsockname()[1]),
            "--workers", "1",
            "--log-level", args.log_level, "--reuse-port", "--metrics-fd", str(metrics_socket.fileno())]
    table = tempfile.NamedTemporaryFile(prefix="switchyard-gateway-", suffix=".connections", delete=False).name
    create_table(table, args.workers)
    # This start's own, new (so empty) directory for the workers' metric files (mode 0700): never
    # another install's, nor an earlier start's, whose counts would be merged into ours.
    metrics_dir = tempfile.mkdtemp(prefix="switchyard-gateway-metrics-")
    host, port = metrics_socket.getsockname()[:2]
    print(f"gateway metrics on http://{host}:{port}/metrics", file=sys.stderr, flush=True)

    def start(index: int) -> subprocess.Popen:
        env = {**os.environ, ENV: f"{table}:{index}:{args.workers}", MULTIPROC_ENV: metrics_dir}
        return subprocess.Popen(argv, env=env, pass_fds=[metrics_socket.fileno()])

    def exited(worker: subprocess.Popen) -> None:
        # Its live gauges (in flight, buffered) no longer count; its counters stay in the sums.
        mark_process_dead(worker.pid, metrics_dir)

    try:
        return _run_workers(args.workers, start, exited)
    finally:
        os.unlink(table)
        metrics_socket.close()
        port_claim.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _run_workers(count: int, start, exited=lambda worker: None) -> int:
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    workers = [start(index) for index in range(count)]
    restarts = [0] * count
    while not stopping:
        time.sleep(0.2)
        for index, worker in enumerate(workers):
            if worker.poll() is None or stopping:
                continue
            exited(worker)
            delay = RESTART_BACKOFF_SECONDS[min(restarts[index], len(RESTART_BACKOFF_SECONDS) - 1)]
            print(f"gateway worker {worker.pid} exited with {worker.returncode}; restarting in {delay} s",
                  file=sys.stderr, flush=True)
            time.sleep(delay)
            restarts[index] += 1
            workers[index] = start(index)
    for worker in workers:  # each worker finishes its requests and writes its buffered usage
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for worker in workers:
        try:
            worker.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
    return 0


if __name__ == "__main__":
    main()
