"""`make stop-trial`: start `make run` and stop it, ROUNDS times per way of stopping; a table of what was left.

Each round is a whole embedded stack (the simulator as its engine) in a temporary var/ on free ports,
stopped at a different moment (starting, running, engine ready) — see bench/_run_stack.py. A round is
clean when no process of the stack outlived it and its ports are free. Seconds are from the signal
until run.py was gone (the worker's warm shutdown, the servers, then `fleet_stop_engines`).

    .venv/bin/python scripts/stop_trial.py            # 10 rounds of each way
    .venv/bin/python scripts/stop_trial.py 3          # 3 rounds of each way
"""
import signal
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._run_stack import MOMENTS, WAYS, stop_once  # noqa: E402


def trial(name: str, rounds: int, var_dir: Path) -> list:
    results = []
    for run in range(rounds):
        moment = MOMENTS[run % len(MOMENTS)]
        stopped = stop_once(var_dir, WAYS[name], moment)
        verdict = "clean" if stopped.clean and stopped.expected_code(WAYS[name]) else "NOT CLEAN"
        print(f"  {name} at {moment!r}: {verdict}, exit {stopped.code}, {stopped.seconds:.1f} s"
              + (f", left {stopped.left}" if stopped.left else "")
              + (f", ports still taken {stopped.busy_ports}" if stopped.busy_ports else ""), flush=True)
        results.append(stopped)
    return results


def main(rounds: int) -> int:
    table = []
    for name in WAYS:
        with tempfile.TemporaryDirectory(prefix="sy-stop-trial-") as var_dir:
            results = trial(name, rounds, Path(var_dir))
        seconds = [r.seconds for r in results]
        clean = sum(r.clean and r.expected_code(WAYS[name]) for r in results)
        table.append((name, len(results), clean, statistics.median(seconds), max(seconds)))
    print("\n| way of stopping | rounds | clean | median stop s | max stop s |\n|---|---|---|---|---|")
    for name, runs, clean, median, worst in table:
        print(f"| {name} | {runs} | {clean} | {median:.1f} | {worst:.1f} |")
    return 0 if all(clean == runs for _, runs, clean, _, _ in table) else 1


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # leaving the stack's block kills whatever of it is alive


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
