"""A report opened in a real headless browser: Debian's chromium driven by selenium through
/usr/bin/chromedriver (never a driver or browser that Selenium Manager would download: SE_OFFLINE)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"


@dataclass(frozen=True)
class Seen:
    text: str  # the rendered text (document.body.innerText)
    severe: list  # console entries at level SEVERE
    svg_count: int
    links: list  # every <a href> as written


def browser_skip_reason() -> Optional[str]:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return f"{path} is absent (apt-get install chromium chromium-driver; .ci/run installs them)"
    return None


def open_report(path: Path, screenshot: Optional[str] = None) -> Seen:
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: no download, ever
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1100,1500", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.get(Path(path).resolve().as_uri())
        text = driver.find_element(By.TAG_NAME, "body").text
        severe = [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
        svgs = len(driver.find_elements(By.TAG_NAME, "svg"))
        links = [a.get_attribute("href") or "" for a in driver.find_elements(By.TAG_NAME, "a")]
        if screenshot:
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1100, min(int(height) + 40, 4000))
            driver.save_screenshot(screenshot)
        return Seen(text, severe, svgs, links)
    finally:
        driver.quit()

