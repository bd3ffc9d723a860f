"""A page opened in headless Chromium (Debian's chromium and chromedriver,
driven by Selenium): what its console said, what each chart drew, and a
screenshot of the whole page kept as a test artefact."""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT, need

ARTIFACTS = Path(os.environ.get("KDIAG_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
# Without the background-networking flags Chromium dials Google's hosts at
# start; this machine's network refuses them, and the console says so.
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1100,900")

CHARTS_JS = """
return Array.from(document.querySelectorAll('[data-chart]')).map(e => {
  const r = e.getBoundingClientRect();
  return [e.dataset.chart, parseInt(e.dataset.marks), r.width, r.height, e.tagName.toLowerCase(),
          e.querySelectorAll('circle,rect,polyline,tr').length];
});
"""


@dataclass
class Opened:
    console: list[dict]        # every console entry: level, message
    charts: dict               # name -> (marks said, width px, height px, tag, marks drawn)
    title: str
    text: str
    screenshot: Path


def open_page(page: Path, shot_name: str) -> Opened:
    need("chromium")
    need("chromedriver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    for f in FLAGS:
        opts.add_argument(f)
    profile = tempfile.mkdtemp(prefix="kdiag-chromium-")
    opts.add_argument(f"--user-data-dir={profile}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Selenium Manager would try to download a driver: name the machine's.
    driver = webdriver.Chrome(service=Service(executable_path=_which("chromedriver")), options=opts)
    try:
        driver.get(Path(page).resolve().as_uri())
        charts = {c[0]: tuple(c[1:]) for c in driver.execute_script(CHARTS_JS)}
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1100, min(int(height) + 40, 12000))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / shot_name
        driver.save_screenshot(str(shot))
        return Opened(console=driver.get_log("browser"), charts=charts, title=driver.title,
                      text=driver.find_element("tag name", "body").text, screenshot=shot)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)   # Chromium's profile: megabytes a page


def _which(tool: str) -> str:
    return shutil.which(tool) or tool
