"""Where a version's weights live, and which locations we accept.

Accepted: a path (or `file:` URI) under SWITCHYARD_MODEL_ROOT, `hf://org/repo@revision`,
`s3://bucket/key`, and `https://` on a public host. Everything else is refused at
registration, because a runtime backend will later fetch or mount whatever is stored here:
an unchecked URI would let a registry admin read arbitrary host files or reach internal
services (SSRF) from the fleet's network position.
"""
import ipaddress
import re
import socket
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError


class ArtifactScheme:
    LOCAL = "local"
    HUGGINGFACE = "hf"
    S3 = "s3"
    HTTPS = "https"


HF_RE = re.compile(r"^hf://(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)@(?P<revision>[\w.-][\w./-]*)$")
S3_RE = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>[^\s]+)$")
BLOCKED_HOST_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa")
BLOCKED_HOSTS = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback",
                           "metadata.google.internal"})


def model_root() -> Path:
    return Path(settings.SWITCHYARD_MODEL_ROOT).resolve()


def _invalid(message: str) -> ValidationError:
    return ValidationError({"artifact_uri": message})


def validate_artifact_uri(uri) -> str:
    """Return the URI (stripped) if acceptable, else a ValidationError on `artifact_uri`."""
    if not isinstance(uri, str) or not uri.strip():
        raise _invalid("An artifact URI is required.")
    uri = uri.strip()
    scheme = artifact_scheme(uri)
    {ArtifactScheme.LOCAL: _local_path, ArtifactScheme.HUGGINGFACE: _check_hf,
     ArtifactScheme.S3: _check_s3, ArtifactScheme.HTTPS: _check_https}[scheme](uri)
    return uri


def artifact_scheme(uri: str) -> str:
    """Which kind of location `uri` names; unsupported schemes are a ValidationError."""
    head, sep, _ = uri.partition(":")
    if not sep or head.startswith(("/", ".")) or "/" in head:
        return ArtifactScheme.LOCAL  # a plain path
    scheme = head.lower()
    if scheme == "file":
        return ArtifactScheme.LOCAL
    if scheme in (ArtifactScheme.HUGGINGFACE, ArtifactScheme.S3, ArtifactScheme.HTTPS):
        return scheme
    raise _invalid(f"Unsupported scheme '{scheme}:'; use a path under the model root, hf://, s3:// or https://.")


def _local_path(uri: str) -> Path:
    """The resolved path under the model root (symlinks followed, `..` collapsed)."""
    raw = _file_uri_path(uri) if uri.lower().startswith("file:") else uri
    root = model_root()
    path = (root / raw).resolve()  # an absolute `raw` replaces root entirely
    if path != root and root not in path.parents:
        raise _invalid(f"Local artifacts must be under the model root {root}; this resolves outside it.")
    if path == root:
        raise _invalid("Name a model directory inside the model root, not the root itself.")
    return path


def local_relative_path(uri: str) -> str:
    """A local artifact's path relative to the model root (where a volume of model directories holds it)."""
    return _local_path(uri).relative_to(model_root()).as_posix()


def _file_uri_path(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise _invalid("file: URIs cannot name another host.")
    if parts.query or parts.fragment:
        raise _invalid("file: URIs take no query or fragment.")
    return unquote(parts.path)


def _check_hf(uri: str) -> None:
    match = HF_RE.match(uri)
    if match is None:
        raise _invalid("Hugging Face artifacts are hf://org/repo@revision (the revision is required: "
                       "pin a commit so the version stays immutable).")
    if ".." in match["repo"] or ".." in match["revision"]:
        raise _invalid("'..' is not allowed in a Hugging Face repo or revision.")


def _check_s3(uri: str) -> None:
    match = S3_RE.match(uri)
    if match is None or ".." in match["bucket"]:
        raise _invalid("S3 artifacts are s3://bucket/key with a valid bucket name and a non-empty key.")
    if ".." in match["key"].split("/"):
        raise _invalid("'..' segments are not allowed in an S3 key.")


def _check_https(uri: str) -> None:
    parts = urlsplit(uri)
    if parts.username is not None or parts.password is not None:
        raise _invalid("Credentials in URLs are not accepted (they would be stored and audited in clear).")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise _invalid("https:// URLs need a host.")
    reason = _private_host_reason(host)
    if reason:
        raise _invalid(f"https:// host '{host}' is not allowed: {reason}.")


def _private_host_reason(host: str) -> str | None:
    """Why `host` is not a public address, or None."""
    if host in BLOCKED_HOSTS or host.endswith(BLOCKED_HOST_SUFFIXES):
        return "it names this machine or a private network"
    address = _ip_literal(host)
    if address is None:
        return None
    if getattr(address, "ipv4_mapped", None):
        address = address.ipv4_mapped
    if not address.is_global or address.is_multicast:
        return "it is a private, loopback, link-local or reserved address"
    return None


def _ip_literal(host: str):
    """The address if `host` is an IP literal, including legacy forms like 127.1 or 2130706433."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))  # what resolvers accept for numeric hosts
    except OSError:
        return None


def local_model_path(version) -> Path:
    """The directory the local runtime passes to `--model`; re-checked now, since links can change."""
    if artifact_scheme(version.artifact_uri) != ArtifactScheme.LOCAL:
        raise ValidationError({"artifact_uri": f"{version} is not a local artifact ({version.artifact_uri})."})
    path = _local_path(version.artifact_uri)
    if not path.is_dir():
        raise ValidationError({"artifact_uri": f"Model directory {path} does not exist."})
    return path
