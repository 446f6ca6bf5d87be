"""The runtime-backend interface: how an instance becomes a running engine, and stops being one.

Every method is idempotent and keyed by the instance, so a worker that died half-way can simply
call it again: `start` adopts an engine already running for the instance, `stop` of a gone
engine is a no-op, and `running` lists what really runs so reconcile can sweep orphans. Only
engines of this install (tagged with its namespace and token) are ever adopted, listed or stopped.
"""
from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Launched:
    """Where a started instance can be reached and how the backend finds it again."""

    endpoint_url: str
    port: int | None
    handle: dict = field(default_factory=dict)


class NoCapacity(Exception):
    """`start` found no room for the engine; the instance stays pending with this reason."""


class RuntimeBackend(ABC):
    """Starts, stops and observes engines for instances of one kind of runtime."""

    name: str = ""
    @property
    def start_deadline_seconds(self) -> float:
        """How long an engine may take from launch to its first healthy /health."""
        return 300.0

    # Whether the fleet's periodic health pass probes this backend's engines; a backend that watches
    # them itself (Kubernetes pods) reports readiness and deaths through its own observer instead.
    probed_by_fleet: bool = True

    @abstractmethod
    def start(self, instance) -> Launched:
        """Make an engine run for `instance` (adopting one that already does) and say where it is.

        Raises NoCapacity (nothing started) when the runtime has no room for it now.
        """

    @abstractmethod
    def stop(self, instance, grace: float) -> bool:
        """Stop the instance's engine: polite signal, then force after `grace` seconds; True once it is gone."""

    @abstractmethod
    def is_alive(self, instance) -> bool:
        """Whether the instance's engine still exists (it may still be unhealthy)."""

    def spec_errors(self, deployment) -> dict[str, str]:
        """Field → problem for what this backend cannot run; by default it takes no simulator parameters."""
        if deployment.simulator_params:
            return {"simulator_params": "Only the simulator runtime takes simulator parameters."}
        return {}

    def serves_endpoint(self, instance) -> bool:
        """Whether what answers at the instance's endpoint is its own engine (not whoever took the port)."""
        return True

    @abstractmethod
    def log_tail(self, instance, lines: int = 40) -> str:
        """The last lines the engine wrote, for the failure record."""

    @abstractmethod
    def running(self) -> dict[int, dict]:
        """Instance id → handle for every engine this backend runs in this install's namespace."""

    @abstractmethod
    def stop_orphan(self, instance_id: int, grace: float) -> bool:
        """Stop an engine that no live instance row accounts for."""
