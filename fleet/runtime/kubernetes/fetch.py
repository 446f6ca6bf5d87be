"""Fetch a model artifact into a directory and refuse it unless its checksum matches (an init container).

    python -m fleet.runtime.kubernetes.fetch --uri URI --checksum sha256:HEX --dest DIR

- `https://…/weights.tar.gz` (or .tgz / .tar): the archive's sha256 must equal the checksum; it is
  then unpacked into DIR (members that would land outside DIR are refused).
- `hf://org/repo@revision`: every file of that revision is downloaded from the Hugging Face hub's
  HTTP API; the checksum is the directory's manifest digest (below).
An empty checksum is refused: weights nobody can verify do not reach a GPU.

Manifest digest of a directory: sha256 over the lines "<relative path>\\0<file sha256 hex>\\n" of
every file, sorted by path — `python -m fleet.runtime.kubernetes.fetch --digest DIR` prints it.
Standard library only, so it runs in any Python image; every download has a timeout.
"""
import argparse
import hashlib
import json
import re
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

TIMEOUT_SECONDS = 60
HUB = "https://huggingface.co"
HF_RE = re.compile(r"^hf://(?P<repo>[\w.-]+/[\w.-]+)@(?P<revision>[\w./-]+)$")
CHUNK = 1 << 20


class FetchError(Exception):
    """The artifact cannot be fetched or does not match its checksum."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_digest(directory: Path) -> str:
    lines = sorted(f"{p.relative_to(directory).as_posix()}\0{file_sha256(p)}\n"
                   for p in directory.rglob("*") if p.is_file())
    return "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()


def _download(url: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as answer, open(target, "wb") as out:
        for block in iter(lambda: answer.read(CHUNK), b""):
            out.write(block)


def fetch_archive(uri: str, checksum: str, dest: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "artifact"
        _download(uri, archive)
        found = "sha256:" + file_sha256(archive)
        if found != checksum:
            raise FetchError(f"checksum mismatch: the artifact is {found}, the registry says {checksum}")
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")  # refuses absolute paths, links out of dest, devices


def fetch_hub(uri: str, checksum: str, dest: Path) -> None:
    match = HF_RE.match(uri)
    if not match:
        raise FetchError(f"not an hf://org/repo@revision URI: {uri}")
    repo, revision = match["repo"], match["revision"]
    listing = f"{HUB}/api/models/{repo}/revision/{urllib.parse.quote(revision, safe='')}"
    with urllib.request.urlopen(listing, timeout=TIMEOUT_SECONDS) as answer:
        files = [entry["rfilename"] for entry in json.load(answer).get("siblings", [])]
    for name in files:
        target = (dest / name).resolve()
        if dest.resolve() not in target.parents:
            raise FetchError(f"refusing a file outside the destination: {name}")
        _download(f"{HUB}/{repo}/resolve/{urllib.parse.quote(revision, safe='')}/{urllib.parse.quote(name)}", target)
    found = manifest_digest(dest)
    if found != checksum:
        raise FetchError(f"checksum mismatch: the files are {found}, the registry says {checksum}")


def fetch(uri: str, checksum: str, dest: Path) -> None:
    if not checksum.startswith("sha256:"):
        raise FetchError("the model version has no sha256 checksum: refusing unverifiable weights")
    dest.mkdir(parents=True, exist_ok=True)
    if uri.startswith("hf://"):
        fetch_hub(uri, checksum, dest)
    elif uri.startswith("https://") and uri.split("?")[0].endswith((".tar", ".tar.gz", ".tgz")):
        fetch_archive(uri, checksum, dest)
    else:
        raise FetchError(f"cannot fetch {uri}: use an https:// .tar(.gz) archive or hf://org/repo@revision, "
                         "or mount a volume holding the weights (weights_pvc)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri")
    parser.add_argument("--checksum", default="")
    parser.add_argument("--dest", type=Path)
    parser.add_argument("--digest", type=Path, help="print a directory's manifest digest and exit")
    args = parser.parse_args(argv)
    if args.digest:
        print(manifest_digest(args.digest))
        return 0
    try:
        fetch(args.uri, args.checksum, args.dest)
    except (FetchError, OSError, tarfile.TarError, ValueError) as exc:
        print(f"fetch failed: {exc}", file=sys.stderr)
        return 1
    print(f"fetched {args.uri} into {args.dest} ({args.checksum})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
