"""Static files as deployed: `collectstatic` with the real storage, served by WhiteNoise in the ASGI app.

Other tests link static files by plain name (tests/conftest.py); this one checks what a browser gets
after `make run`: hashed names in the pages, gzip, a far-future cache, our CSP, no Django warning.
"""
import asyncio
import re
import warnings

import httpx
import pytest
from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.management import call_command
from django.test.utils import override_settings

from controlplane.middleware import CONTENT_SECURITY_POLICY

MANIFEST_STORAGE = "whitenoise.storage.CompressedManifestStaticFilesStorage"


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """The ASGI app over a freshly collected STATIC_ROOT, with the storage the settings configure."""
    assert settings.STORAGES["staticfiles"]["BACKEND"] != MANIFEST_STORAGE  # the suite's plain names
    root = tmp_path_factory.mktemp("static")
    storages = {**settings.STORAGES, "staticfiles": {"BACKEND": MANIFEST_STORAGE}}
    with override_settings(STATIC_ROOT=root, STORAGES=storages):
        call_command("collectstatic", interactive=False, verbosity=0)
        yield get_asgi_application(), root


def fetch(app, *paths: str, **headers) -> list[httpx.Response]:
    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return [await client.get(path, headers=headers) for path in paths]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. Django's "must consume synchronous iterators"
        return asyncio.run(run())


def test_pages_link_hashed_files_served_compressed_and_cached_for_ever(deployed):
    app, root = deployed
    [page] = fetch(app, "/console/login/")
    assert page.status_code == 200
    css, js = (re.search(rf'"(/static/console/console\.[0-9a-f]{{12}}\.{kind})"', page.text).group(1)
               for kind in ("css", "js"))
    for asset in fetch(app, css, js, **{"accept-encoding": "gzip"}):
        assert asset.status_code == 200 and asset.headers["content-encoding"] == "gzip"
        assert "immutable" in asset.headers["cache-control"] and "max-age=315360000" in asset.headers["cache-control"]
        assert asset.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert asset.headers["x-content-type-options"] == "nosniff"
    assert (root / css.removeprefix("/static/")).read_bytes() == fetch(app, css)[0].content  # decoded: the same file
    [stylesheet] = fetch(app, css, **{"accept-encoding": "identity"})
    assert "content-encoding" not in stylesheet.headers and stylesheet.headers["content-type"].startswith("text/css")


def test_the_api_docs_load_their_bundles_from_us(deployed):
    app, _ = deployed
    [docs] = fetch(app, "/api/docs/")
    bundles = re.findall(r'"(/static/drf_spectacular_sidecar/[^"]+\.[0-9a-f]{12}\.(?:js|css))"', docs.text)
    assert bundles and "cdn" not in docs.text.lower()
    assert all(response.status_code == 200 for response in fetch(app, *bundles))


def test_a_file_that_was_not_collected_is_a_404_not_a_fallback(deployed):
    app, _ = deployed
    [missing] = fetch(app, "/static/console/nope.css")
    assert missing.status_code == 404
