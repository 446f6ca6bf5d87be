"""Who did something: passed to every service as `actor=` and frozen into audit rows."""
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import models

from controlplane.request_context import request_id_var, source_ip_var

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from apikeys.models import ApiKey


class ActorType(models.TextChoices):
    USER = "user", "User (console session)"
    API_KEY = "api_key", "API key"
    SYSTEM = "system", "System"
    ANONYMOUS = "anonymous", "Anonymous"


@dataclass(frozen=True)
class Actor:
    """The principal behind a write: a user, an API key (by prefix only) or the system."""

    type: str
    label: str
    user: "User | None" = None
    api_key: "ApiKey | None" = None

    @classmethod
    def system(cls, label: str = "system") -> "Actor":
        return cls(type=ActorType.SYSTEM, label=label)

    @classmethod
    def for_user(cls, user) -> "Actor":
        return cls(type=ActorType.USER, label=user.get_username(), user=user)

    @classmethod
    def for_api_key(cls, api_key) -> "Actor":
        owner = f" ({api_key.user.get_username()})" if api_key.user_id else ""
        return cls(type=ActorType.API_KEY, label=f"{api_key.prefix}{owner}", user=api_key.user, api_key=api_key)

    @classmethod
    def anonymous(cls, label: str = "anonymous") -> "Actor":
        return cls(type=ActorType.ANONYMOUS, label=label[:150])

    @classmethod
    def from_request(cls, request) -> "Actor":
        """The actor of an API or console request (API key wins over the session user)."""
        from apikeys.models import ApiKey

        auth = getattr(request, "auth", None)
        if isinstance(auth, ApiKey):
            return cls.for_api_key(auth)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return cls.for_user(user)
        return cls.anonymous()

    @property
    def request_id(self) -> str:
        return request_id_var.get()

    @property
    def source_ip(self) -> str | None:
        return source_ip_var.get()
