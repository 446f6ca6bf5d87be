"""Headless Chromium for the console's browser tests: Debian's /usr/bin/chromium driven by Playwright.

Never `playwright install`: it downloads a browser. `make browser` installs Debian's package and
axe-core (npm ci). Playwright's sync API keeps an event loop in the test thread, so the browser
modules allow Django's ORM there (DJANGO_ALLOW_ASYNC_UNSAFE) for their own duration only.
"""
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
AXE = REPO_ROOT / "node_modules" / "axe-core" / "axe.min.js"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
PASSWORD = "correct horse battery 9"
# Screenshots for docs/images are written only when asked: SWITCHYARD_CONSOLE_SCREENSHOTS=docs/images
SCREENSHOT_DIR = os.environ.get("SWITCHYARD_CONSOLE_SCREENSHOTS")


def ensure_chain_head() -> None:
    """The chain head every audited write locks (a transactional test's flush deletes the migration's row)."""
    from audit.chain import GENESIS_HASH, head_message, sign
    from audit.models import AuditChainHead

    AuditChainHead.objects.get_or_create(
        pk=1, defaults={"seq": 0, "hash": GENESIS_HASH, "signature": sign(head_message(0, GENESIS_HASH))})


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module (import this fixture into the module that uses it)."""
    with chromium() as launched:
        yield launched


@contextmanager
def chromium():
    """A headless browser for one test module; fails loudly when the browser is missing."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def sign_in(page, base_url: str, username: str) -> None:
    """Through the real sign-in form, with the keyboard."""
    page.goto(f"{base_url}/console/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: "/console/login/" not in url)


def serious_violations(page) -> list[dict]:
    """axe-core's serious and critical findings on the current page (injected past our CSP)."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: run `make browser` (npm ci)")
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [{"id": v["id"], "impact": v["impact"], "help": v["help"],
             "nodes": [n["target"] for n in v["nodes"]][:5]}
            for v in result["violations"] if v["impact"] in ("serious", "critical")]


def screenshot(page, name: str) -> None:
    if SCREENSHOT_DIR:
        target = REPO_ROOT / SCREENSHOT_DIR
        target.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(target / f"console-{name}.png"), full_page=True)
