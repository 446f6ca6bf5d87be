"""Start-up checks: every configured runtime backend imports and builds (a bad setting fails `manage.py check`)."""
from django.core import checks


@checks.register()
def runtime_backends_import(app_configs, **kwargs):
    from fleet.runtime import backend_names, get_backend

    problems = []
    for name in backend_names():
        try:
            get_backend(name)
        except Exception as exc:  # any failure to build is the setting's fault, named as such
            problems.append(checks.Error(f"runtime backend {name!r} cannot be built: {exc}",
                                         hint="Check SWITCHYARD_RUNTIME_BACKENDS (docs/runtime-backends.md).",
                                         id="fleet.E001"))
    return problems
