"""The gateway's knobs, read once from Django settings (themselves from the environment)."""
from __future__ import annotations

from dataclasses import dataclass

LOCAL_ONLY = ("default_user_rpm", "redis_scope")  # not SWITCHYARD_GATEWAY_* settings


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Everything the running gateway needs to know; built once at start."""

    redis_url: str  # "" = no Redis: inference is refused (503 redis_not_configured), /healthz says why
    max_body_bytes: int = 32 * 1024 * 1024
    connect_timeout: float = 2.0
    first_byte_timeout: float = 60.0
    idle_timeout: float = 30.0
    refresh_seconds: float = 0.3  # the version-marker poll while the change bus is down
    change_bus: bool = True  # subscribe to the control plane's change bus (else poll every refresh_seconds)
    backstop_seconds: float = 5.0  # the version-marker poll while the change bus is up
    eject_after_failures: int = 3
    key_cache_size: int = 10_000
    negative_key_ttl: float = 2.0
    usage_flush_seconds: float = 1.0
    usage_batch: int = 500
    usage_spool_dir: str = "var/usage-spool"  # usage events while the database is away, and the dead letter
    usage_spool_max_bytes: int = 1024 ** 3  # the spool's bound (the dead letter's too); 0 turns the spool off
    default_user_rpm: int = 120
    queue_inflight_per_instance: int = 64  # requests per engine before a pool counts as saturated
    queue_shared: bool = True  # slots and turns shared by every gateway process through Redis (else per process)
    queue_max: int = 1000  # requests waiting per pool
    queue_max_per_tenant: int = 100  # requests one tenant may have waiting per pool
    queue_max_wait: float = 30.0
    fallback_first_byte_ms: int = 500  # budget before a request moves to the deployment's fallback model
    dedup_ttl_seconds: float = 60.0  # 0 turns the de-duplication cache off
    prefix_warmup: int = 8  # heads sent to an engine joining a pool (gateway.routing.prefix_warmup); 0: none
    prefix_warmup_timeout: float = 10.0  # seconds per warm-up request
    prompt_sample_chars: int = 500  # redacted prompt start kept for the slow-requests page; 0 keeps none
    # The install id that scopes the limits' and the cache's Redis keys (controlplane/redis_keys.py);
    # "" = this database's, read at start. Tests give each gateway its own, so counters start at zero.
    redis_scope: str = ""

    @classmethod
    def from_settings(cls, **overrides) -> "GatewayConfig":
        """Read `SWITCHYARD_GATEWAY_*` settings; keyword overrides win (tests use them)."""
        from django.conf import settings

        values = {name: getattr(settings, "SWITCHYARD_GATEWAY_" + name.upper())
                  for name in cls.__dataclass_fields__ if name not in LOCAL_ONLY}
        values["default_user_rpm"] = settings.SWITCHYARD_DEFAULT_USER_RPM
        return cls(**{**values, **overrides})
