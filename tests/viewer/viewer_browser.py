"""Headless Debian chromium driven by selenium (chromium-driver), for the report's browser test.

JavaScript errors are collected two ways: ``window.onerror`` / unhandled rejections recorded
by a script installed before any page script runs (CDP ``Page.addScriptToEvaluateOnNewDocument``),
and the browser's console log at level SEVERE.
"""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVER_PATHS = ("/usr/bin/chromedriver",)

ERROR_HOOK = """
window.__rollErrors = [];
window.addEventListener('error', function (e) {
  window.__rollErrors.push('error: ' + e.message + ' at ' + e.filename + ':' + e.lineno);
});
window.addEventListener('unhandledrejection', function (e) {
  window.__rollErrors.push('unhandled rejection: ' + String(e.reason));
});
"""


def find(paths: tuple[str, ...], name: str) -> str | None:
    for p in paths:
        if shutil.which(p):
            return p
    return shutil.which(name)


def unavailable_reason() -> str | None:
    """Why the browser test cannot run here (None when it can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'roll[dev]')"
    if not find(CHROMIUM_PATHS, "chromium"):
        return "chromium is not installed (apt-get install chromium chromium-driver; scripts/install_cpu.sh --test)"
    if not find(DRIVER_PATHS, "chromedriver"):
        return "chromedriver is not installed (apt-get install chromium-driver)"
    return None


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="roll-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = find(CHROMIUM_PATHS, "chromium")
    # root in a container needs --no-sandbox; the background-networking flags stop chromium's
    # own connections (refused here, many at a time); a fresh profile keeps runs independent
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
                 f"--window-size={width},{height}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=find(DRIVER_PATHS, "chromedriver")))
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ERROR_HOOK})
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def js_errors(driver) -> list[str]:
    """Errors the page raised so far (window.onerror) plus SEVERE console entries."""
    errors = list(driver.execute_script("return window.__rollErrors || ['error hook missing'];"))
    errors += [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    return errors


def screenshot(report: str, out: str, row: int = 0, width: int = 1400, height: int = 1000) -> None:
    """Open ``report``, select trajectory ``row`` and save a screenshot (docs/images/ is made
    with this)."""
    from pathlib import Path

    with chromium(width, height) as driver:
        driver.get(Path(report).resolve().as_uri())
        driver.execute_script("var r = document.querySelectorAll('#traj-list tr.row'); if (r.length) r[arguments[0]].click();",
                              row)
        errors = js_errors(driver)
        if errors:
            raise SystemExit(f"the page raised: {errors}")
        driver.save_screenshot(out)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="screenshot of a roll report in headless chromium")
    ap.add_argument("report")
    ap.add_argument("out")
    ap.add_argument("--row", type=int, default=0, help="trajectory to open")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=1000)
    a = ap.parse_args()
    screenshot(a.report, a.out, a.row, a.width, a.height)
