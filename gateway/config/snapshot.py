"""The gateway's in-memory view of configuration: immutable, swapped whole on every change.

Requests read one `Snapshot` object and never the database; `snapshot_loader` builds a new
one in a thread when the version marker moves, and the refresher swaps the reference.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from models_registry.fim import FimTemplate

DEFAULT_POLICY = "prefix_affinity"
DEFAULT_REDACTION_MODE = "redact"


def _empty() -> Mapping:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class TenantInfo:
    """What a request needs to know about its tenant."""

    id: int
    slug: str
    active: bool
    redaction_mode: str = DEFAULT_REDACTION_MODE
    cache_salt: str = ""
    over_budget: str | None = None  # the usage app's reason, while the monthly money budget is spent
    cancel_superseded: bool = True  # an editor session's newer interactive request cancels its older one


@dataclass(frozen=True, slots=True)
class Limits:
    """One quota policy level (tenant, key or user); None means no limit at this level."""

    level: str
    subject_id: int
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_requests: int | None = None
    monthly_token_budget: int | None = None
    monthly_budget_usd: float | None = None
    allowed_models: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """An API key as the gateway caches it: never the raw key, never the hash."""

    id: int
    prefix: str
    tenant_id: int | None
    user_id: int | None
    scopes: frozenset[str]
    expires_at: float | None  # epoch seconds
    revoked: bool

    def state(self, now: float) -> str:
        """active, revoked or expired at `now` (epoch seconds)."""
        if self.revoked:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


@dataclass(frozen=True, slots=True)
class Upstream:
    """One routable engine: a ready instance of an active deployment."""

    instance_id: int
    url: str
    deployment_id: int
    model_version_id: int
    shared: bool


@dataclass(frozen=True, slots=True)
class Pool:
    """An active deployment of a model and its ready instances (possibly none)."""

    deployment_id: int
    tenant_id: int | None
    model_version_id: int
    policy: str = DEFAULT_POLICY
    supports_priority: bool = False
    upstreams: tuple[Upstream, ...] = ()
    fallback_model: str = ""  # where requests go while this pool is saturated or slow
    # Seconds a request may wait for this deployment to wake from zero; None: it never sleeps.
    wake_timeout: float | None = None
    # While a rollout splits traffic: ((version id, weight), …), the new version first; empty otherwise.
    version_weights: tuple[tuple[int, float], ...] = ()
    sticky_by: str = ""  # what keeps a caller on one version then (rollouts.models.StickyBy)

    @property
    def asleep(self) -> bool:
        return not self.upstreams and self.wake_timeout is not None


_UNSET = object()
MAX_MEMO_ENTRIES = 10_000  # per memo of a snapshot; cleared when full


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the hot path reads, as of one version marker."""

    version: tuple = ()
    tenants: Mapping[int, TenantInfo] = field(default_factory=_empty)
    tenant_policies: Mapping[int, Limits] = field(default_factory=_empty)
    key_policies: Mapping[int, Limits] = field(default_factory=_empty)
    user_policies: Mapping[tuple[int, int], Limits] = field(default_factory=_empty)
    pools: Mapping[str, tuple[Pool, ...]] = field(default_factory=_empty)
    # By model version id, for every version a pool serves: its fill-in-the-middle template, or None.
    fim_templates: Mapping[int, FimTemplate | None] = field(default_factory=_empty)
    default_user_rpm: int = 120
    install_id: str = ""  # the install this data is of: it scopes the gateway's Redis keys (controlplane/redis_keys.py)
    loaded_at: float = field(default=0.0, compare=False)
    _pools_memo: dict = field(default_factory=dict, compare=False, repr=False)
    _allowed_memo: dict = field(default_factory=dict, compare=False, repr=False)

    def policies_for(self, key: KeyInfo) -> tuple[Limits, ...]:
        """Every level that governs this key's requests; each is enforced on its own."""
        found = (self.tenant_policies.get(key.tenant_id), self.key_policies.get(key.id),  # type: ignore[arg-type]
                 self.user_policies.get((key.tenant_id, key.user_id)) if key.user_id else None)  # type: ignore[arg-type]
        return tuple(level for level in found if level is not None)

    def user_rpm(self, key: KeyInfo) -> int | None:
        """A person's own rate: their policy's, else the default; service keys have none."""
        if key.user_id is None:
            return None
        policy = self.user_policies.get((key.tenant_id, key.user_id))  # type: ignore[arg-type]  # None finds none
        return (policy and policy.requests_per_minute) or self.default_user_rpm

    def has_token_budget(self, key: KeyInfo) -> bool:
        """Is any monthly token budget counting this key's requests?"""
        return any(level.monthly_token_budget is not None for level in self.policies_for(key))

    def model_allowed(self, key: KeyInfo, model: str) -> bool:
        """True unless some applicable level has an allow-list without this model.

        Remembered per (key, model) for this snapshot's life (its policies never change), for
        models the snapshot serves, so made-up names cannot grow the memo."""
        memo_key = (key.id, key.tenant_id, key.user_id, model)
        allowed = self._allowed_memo.get(memo_key)
        if allowed is None:
            allowed = all(level.allowed_models is None or model in level.allowed_models
                          for level in self.policies_for(key))
            if model in self.pools:
                if len(self._allowed_memo) >= MAX_MEMO_ENTRIES:
                    self._allowed_memo.clear()
                self._allowed_memo[memo_key] = allowed
        return allowed

    def pools_for(self, tenant_id: int | None, model: str) -> tuple[Pool, ...] | None:
        """The tenant's dedicated pools of a model, else the shared ones; None if it has neither.

        Remembered per (tenant, model) for this snapshot's life (it is immutable); only names the
        snapshot holds are remembered, so made-up model names cannot grow the memo."""
        memo_key = (tenant_id, model)
        found = self._pools_memo.get(memo_key, _UNSET)
        if found is _UNSET:
            found = self._pools_for(tenant_id, model)
            if model in self.pools:
                self._pools_memo[memo_key] = found
        return found

    def _pools_for(self, tenant_id: int | None, model: str) -> tuple[Pool, ...] | None:
        pools = self.pools.get(model, ())
        dedicated = tuple(p for p in pools if p.tenant_id is not None and p.tenant_id == tenant_id)
        if any(p.upstreams for p in dedicated):
            return dedicated
        shared = tuple(p for p in pools if p.tenant_id is None)
        return (dedicated + shared) or None

    def fallback_for(self, key: KeyInfo, pools: tuple[Pool, ...]) -> tuple[str, tuple[Pool, ...]] | None:
        """The pools' fallback model and its routable pools for this key, if it has any."""
        name = next((p.fallback_model for p in pools if p.fallback_model), "")
        if not name or any(p in pools for p in self.pools.get(name, ())) or not self.model_allowed(key, name):
            return None
        fallback = self.pools_for(key.tenant_id, name)
        return (name, fallback) if fallback and any(p.upstreams for p in fallback) else None

    def models_for(self, key: KeyInfo) -> list[str]:
        """Models this key may use and that have a routable instance for its tenant (or one asleep, which
        wakes on the first request)."""
        names = []
        for name in sorted(self.pools):
            pools = self.pools_for(key.tenant_id, name)
            if pools and any(p.upstreams or p.asleep for p in pools) and self.model_allowed(key, name):
                names.append(name)
        return names
