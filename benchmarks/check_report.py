"""Build a run's report and open it in headless Chromium: how long the build takes, how big the file is, how
many charts it has and which (if any) draw nothing. The same checker as tests/test_report.py.

    PYTHONPATH=. .venv/bin/python benchmarks/check_report.py runs/demo
"""
from __future__ import annotations

import sys
import time

from report import build_report
from runio.layout import RunPaths
from tests.test_report import CHROMEDRIVER, CHROMIUM, empty_charts


def main(run_dir: str) -> int:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    started = time.perf_counter()
    out = build_report(RunPaths(run_dir))
    print(f"build_report: {time.perf_counter() - started:.1f} s, {out.stat().st_size / 1e6:.1f} MB → {out}")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--window-size=1280,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        empty = empty_charts(driver, out)
        charts = driver.execute_script("return [...document.querySelectorAll('div.chart')].map(c => c.dataset.chart)")
    finally:
        driver.quit()
    print(f"{len(charts)} charts: {', '.join(charts)}")
    print(f"empty: {empty or 'none'}")
    return 1 if empty else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
