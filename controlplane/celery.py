"""The Celery app: configured from Django settings (CELERY_*), tasks autodiscovered per app."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")


class SwitchyardCelery(Celery):
    """On a Redis broker, every connection's keys and channels carry this install's prefix.

    kombu's `global_keyprefix` is a transport option, but settings cannot hold it: the install id
    is in the database. Every connection Celery makes (producers, the worker's consumer, its
    remote-control and event channels) comes through these two methods, which add it.
    """

    def connection_for_read(self, url=None, **kwargs):
        return super().connection_for_read(url, **_scoped(self, url, kwargs))

    def connection_for_write(self, url=None, **kwargs):
        return super().connection_for_write(url, **_scoped(self, url, kwargs))


def _scoped(app: Celery, url, kwargs: dict) -> dict:
    if not str(url or app.conf.broker_url or "").startswith(("redis://", "rediss://", "redis+socket://")):
        return kwargs
    from controlplane.redis_keys import celery_prefix

    options = {"global_keyprefix": celery_prefix(), **(kwargs.get("transport_options") or {})}
    return {**kwargs, "transport_options": options}


app = SwitchyardCelery("switchyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
