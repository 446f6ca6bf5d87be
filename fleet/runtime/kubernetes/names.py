"""Names and labels of the objects the Kubernetes backend owns.

Every object carries the install's id, so two installs on one cluster select only their own; the
namespace of a tenant's engines is `<prefix>-<tenant slug>` (`<prefix>-shared` for shared pools),
shortened with a hash when it would pass Kubernetes' 63 characters.
"""
import hashlib

DNS_LABEL_MAX = 63
LABEL_PREFIX = "switchyard.dev"
MANAGED_BY = {"app.kubernetes.io/managed-by": "switchyard"}
INSTALL = f"{LABEL_PREFIX}/install"
TENANT = f"{LABEL_PREFIX}/tenant"
DEPLOYMENT = f"{LABEL_PREFIX}/deployment"
INSTANCE = f"{LABEL_PREFIX}/instance"
COMPONENT = "app.kubernetes.io/component"
ENGINE_COMPONENT = "engine"
ENGINE_PORT = 8000
SHARED = "shared"


def dns_label(text: str) -> str:
    """`text` as a DNS label: kept when it fits, else cut and suffixed with a hash of the whole."""
    if len(text) <= DNS_LABEL_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:DNS_LABEL_MAX - 9].rstrip('-')}-{digest}"


def namespace(prefix: str, tenant_slug: str | None) -> str:
    """The namespace holding one tenant's engines (or the shared pools')."""
    return dns_label(f"{prefix}-{tenant_slug or SHARED}")


def instance_object(install_id: str, instance_id: int) -> str:
    """Name of an instance's pod (or LeaderWorkerSet) and Service: unique per install."""
    return f"sy-{install_id[:8]}-i{instance_id}"


def deployment_object(install_id: str, deployment_id: int) -> str:
    """Name of a deployment's PodDisruptionBudget."""
    return f"sy-{install_id[:8]}-d{deployment_id}"


def install_labels(install_id: str) -> dict[str, str]:
    return {**MANAGED_BY, INSTALL: install_id}


def engine_labels(install_id: str, tenant_slug: str | None, deployment_id: int, instance_id: int) -> dict[str, str]:
    return {**install_labels(install_id), COMPONENT: ENGINE_COMPONENT, TENANT: tenant_slug or SHARED,
            DEPLOYMENT: str(deployment_id), INSTANCE: str(instance_id)}


def selector(labels: dict[str, str]) -> str:
    """A label selector string matching every label given."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
