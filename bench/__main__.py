"""Run every `bench/<name>.py` module's `main()`, in name order (modules starting with _ are helpers).

    python -m bench                    # all of them
    python -m bench gateway routing    # only these, in the order given
"""
import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv=None) -> None:
    available = sorted(info.name for info in pkgutil.iter_modules([str(Path(__file__).parent)])
                       if not info.name.startswith("_"))
    names = list(argv if argv is not None else sys.argv[1:]) or available
    unknown = [name for name in names if name not in available]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {', '.join(unknown)}; one of: {', '.join(available)}")
    try:
        for name in names:
            print(f"\n## bench.{name}\n", flush=True)
            importlib.import_module(f"bench.{name}").main()
    except KeyboardInterrupt:
        raise SystemExit("\ninterrupted (every process the benchmark started has been stopped)") from None


if __name__ == "__main__":
    main()
