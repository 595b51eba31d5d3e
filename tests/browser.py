"""Headless Chromium for the report's tests (Debian's ``chromium`` and ``chromium-driver``, driven by
selenium): found where it is, installed with apt-get where it is missing and this is root, or the test is
skipped with the reason. Each page load starts clean; its console errors are collected."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1400,1000",
)  # fmt: skip
PACKAGES = ("chromium", "chromium-driver")
INSTALL_TIMEOUT_S = 900


def _found() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def _install() -> str:
    """apt-get install the browser and its driver; '' or why it could not."""
    if not shutil.which("apt-get"):
        return "no apt-get on this machine"
    if os.geteuid() != 0:
        return "not root, so apt-get cannot install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    for step in (["apt-get", "update", "-q"], cmd):
        try:
            done = subprocess.run(step, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(step)}` took more than {INSTALL_TIMEOUT_S} s"
        if done.returncode != 0 and step is cmd:
            tail = (done.stderr.strip().splitlines() or ["?"])[-1]
            return f"`{' '.join(step)}` failed: {tail}"
    return ""


def chromium() -> tuple[str, str]:
    """(browser, driver) paths, installing them where missing; pytest.skip with the reason otherwise."""
    found = _found()
    if found is None:
        why = _install()
        found = _found()
        if found is None:
            what = " and ".join(PACKAGES)
            pytest.skip(
                f"headless Chromium is not installed ({what}) and {why or 'apt-get did not provide it'}"
            )
    return found


class Browser:
    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def load(self, path: Path) -> list[dict[str, Any]]:
        """Open a file of the site and wait for its script; the console's errors (and warnings) of it."""
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver.get_log("browser")  # drop what an earlier page left
        self.driver.get(path.resolve().as_uri())
        WebDriverWait(self.driver, 20).until(
            lambda d: d.execute_script(
                "return document.readyState === 'complete' && document.body.dataset.ready === '1'"
            )
        )
        return [e for e in self.driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def screenshot(self, out: Path) -> Path:
        height = self.js("return document.documentElement.scrollHeight")
        self.driver.set_window_size(1400, min(int(height) + 40, 6000))
        out.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(out))
        self.driver.set_window_size(1400, 1000)
        return out


def open_browser(profile: Path) -> Iterator[Browser]:
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is the `test` extra: pip install -e '.[test]'"
    )
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = chromium()
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(driver_path))
    try:
        yield Browser(driver)
    finally:
        driver.quit()
