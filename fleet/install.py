"""Who this install is: an id made once per database, and the token every engine of it carries.

Every process of one install (console, gateway, workers, `manage.py`) reads the same row, so they
agree without configuration; a second install on the host has its own database, hence its own id
and token. Engines are found by their environment, so an engine proves it is ours by carrying
both our namespace and our token: an id that merely matches (instance ids restart at 1 in every
database) is never adopted or stopped.
"""
import secrets

from django.conf import settings

from fleet.runtime.processes import EngineOwner


def new_identity() -> dict:
    """Fresh values for the install row (also used by the migration that creates it)."""
    return {"install_id": secrets.token_hex(8), "engine_token": secrets.token_hex(24)}


def current_install():
    """The install row, created on first use if a flush removed it (two creators agree: one wins)."""
    from fleet.models import Install

    install, _ = Install.objects.get_or_create(pk=1, defaults=new_identity())
    return install


def install_id() -> str:
    return current_install().install_id


def namespace_for(install) -> str:
    """SWITCHYARD_FLEET_NAMESPACE if set (its token still has to match), else one derived from the id."""
    return settings.SWITCHYARD_FLEET_NAMESPACE or f"sy-{install.install_id}"


def engine_owner() -> EngineOwner:
    """The namespace and token this install's engines are tagged with (one small query)."""
    install = current_install()
    return EngineOwner(namespace=namespace_for(install), token=install.engine_token)
