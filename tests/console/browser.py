"""A real headless browser for the console's tests and bench: Debian's ``chromium`` driven through its
``chromium-driver`` by selenium (no browser is downloaded: selenium's own manager is never asked for one).

As root, Chromium needs ``--no-sandbox``; on a closed network its background services (updates, sync, field
trials, QUIC) would open connections that are refused, many at a time, so they are switched off. Each browser gets a
fresh profile directory of its own.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--disable-dev-shm-usage", "--mute-audio",
         "--window-size=1600,1500")


def missing() -> str | None:
    """Why no browser can be driven here (None: it can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the test extra)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(path) is None:
            return f"{path} is missing: apt-get install chromium chromium-driver"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A selenium WebDriver on a headless Chromium with a fresh profile; quit and its profile removed after."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="console-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
