"""Headless Debian chromium through Selenium and chromium-driver, for the few real-browser tests.

Use it from a test module::

    from _browser import Browser, start_browser

    @pytest.fixture(scope="module")
    def browser() -> Iterator[Browser]:
        with start_browser() as b:
            yield b

``start_browser`` skips the test when chromium, chromedriver or selenium is missing, and fails it instead
when ``STALLSCOPE_REQUIRE_BROWSER=1`` (CI sets it, so that a broken install cannot pass as a skip).
Console errors are collected through ``goog:loggingPrefs``; ``png_stats`` decodes a screenshot (in the
browser) so a test can tell a drawn page from a blank one.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)
REQUIRE_ENV = "STALLSCOPE_REQUIRE_BROWSER"


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name) if not name.startswith("/") else (name if Path(name).exists() else None)
        if found:
            return found
    return None


def _unavailable(why: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but the browser is unavailable: {why}")
    pytest.skip(why)


@dataclass
class Browser:
    driver: Any  # selenium.webdriver.Chrome

    def open(self, target: str | Path) -> None:
        """Open a URL, or a local file by path."""
        url = target if isinstance(target, str) and "://" in target else Path(target).resolve().as_uri()
        self.driver.get(url)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait_for(self, script: str, timeout: float = 10.0) -> Any:
        """Poll a JS expression (``return ...``) until it is truthy; returns its value or fails."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(script)
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout} s waiting for: {script}")
            time.sleep(0.05)

    def fresh(self) -> None:
        """Start from a blank page and drop the console log so far: a test reads only its own console
        (a previous test's dashboard page would go on polling its stopped server)."""
        self.driver.get("about:blank")
        self.driver.get_log("browser")

    def console_errors(self) -> list[str]:
        """SEVERE console entries since the last call (uncaught exceptions, failed loads, console.error)."""
        return [e["message"] for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]

    def dialog_text(self) -> str | None:
        """The text of an open alert/confirm/prompt, or None when no dialog is open."""
        try:
            alert = self.driver.switch_to.alert
        except Exception:  # selenium raises NoAlertPresentException
            return None
        text = str(alert.text)
        alert.dismiss()
        return text

    def screenshot(self, path: Path | None = None) -> bytes:
        png: bytes = self.driver.get_screenshot_as_png()
        if path is not None:
            path.write_bytes(png)
        return png


@contextmanager
def start_browser(width: int = 1400, height: int = 1000) -> Iterator[Browser]:
    """Start headless chromium (skips or fails as the module docstring says); quits it afterwards."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed (pip install -e '.[dev]')")
    binary = _find("/usr/bin/chromium", "chromium", "chromium-browser")
    driver_path = _find("/usr/bin/chromedriver", "chromedriver")
    if binary is None or driver_path is None:
        _unavailable("chromium / chromedriver not found (Debian: apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(binary)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(executable_path=str(driver_path)), options=options)
    except Exception as exc:  # WebDriverException: a broken install must read as unavailable
        _unavailable(f"chromium did not start: {str(exc).splitlines()[0] if str(exc) else exc!r}")
    driver.set_page_load_timeout(60)
    try:
        yield Browser(driver)
    finally:
        driver.quit()


@dataclass(frozen=True)
class PngStats:
    width: int
    height: int
    colours: int  # distinct colours among sampled pixels
    non_background: float  # share of sampled pixels that differ from the top-left pixel


_PNG_STATS_JS = """
const [data, step, done] = arguments;
const img = new Image();
img.onload = () => {
  const c = document.createElement("canvas");
  c.width = img.width; c.height = img.height;
  const ctx = c.getContext("2d");
  ctx.drawImage(img, 0, 0);
  const px = ctx.getImageData(0, 0, c.width, c.height).data;
  const bg = px.slice(0, 4).join(",");
  const seen = new Set(); let differ = 0, total = 0;
  for (let y = 0; y < c.height; y += step) {
    for (let x = 0; x < c.width; x += step) {
      const i = (y * c.width + x) * 4;
      const key = px[i] + "," + px[i + 1] + "," + px[i + 2] + "," + px[i + 3];
      seen.add(key); differ += key !== bg; total += 1;
    }
  }
  done([c.width, c.height, seen.size, differ / Math.max(total, 1)]);
};
img.onerror = () => done(null);
img.src = "data:image/png;base64," + data;
"""


def png_stats(browser: Browser, png: bytes, step: int = 5) -> PngStats:
    """Decode a screenshot in the browser (a canvas; the test environment has no imaging library) and
    sample every ``step``-th pixel: enough to tell a drawn page from a blank one."""
    import base64

    out = browser.driver.execute_async_script(_PNG_STATS_JS, base64.b64encode(png).decode(), step)
    assert out is not None, "the browser could not decode the screenshot"
    return PngStats(int(out[0]), int(out[1]), int(out[2]), float(out[3]))
