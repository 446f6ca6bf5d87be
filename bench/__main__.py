"""Run every `bench/<name>.py` module's `main()`, in name order (modules starting with _ are helpers)."""
import importlib
import pkgutil
from pathlib import Path


def main() -> None:
    names = sorted(info.name for info in pkgutil.iter_modules([str(Path(__file__).parent)])
                   if not info.name.startswith("_"))
    for name in names:
        print(f"\n## bench.{name}\n")
        importlib.import_module(f"bench.{name}").main()


if __name__ == "__main__":
    main()
