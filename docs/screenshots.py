"""Regenerate the screenshots in docs/images/ from the shared 8-rank DLRM job, with headless chromium.

    .venv/bin/python docs/screenshots.py [JOB_FOLDER]   # default ../shared/traces/param_dlrm_v100_8rank

Writes report-top.png (the report's first screen: the job verdict and the ranks), report-job.png (the
report's job section: the lateness heatmap), report-timeline.png (the straggler's timeline behind the
rank picker) and dashboard-job.png (the dashboard's job page for the same folder, uploaded as a tarball
to a dashboard served on 127.0.0.1). Needs Debian's chromium and chromedriver, and selenium (the dev
extra).
"""

from __future__ import annotations

import io
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
DEFAULT_JOB = ROOT.parent / "shared" / "traces" / "param_dlrm_v100_8rank"
WIDTH, HEIGHT = 1400, 1000


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={WIDTH},{HEIGHT}")
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def wait_for(driver: Any, script: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for: {script}")


def report_shots(driver: Any, job: Path, work: Path) -> None:
    from stallscope.commands import main

    page = work / "job.report.html"
    if main(["report", str(job), "-o", str(page), "-q"]) != 0:
        raise SystemExit("stallscope report failed")
    driver.get(page.as_uri())
    wait_for(driver, "return document.body.getAttribute('data-drawn') === 'all'")
    driver.save_screenshot(str(OUT / "report-top.png"))
    for target, name in (("#heatmap-late_us", "report-job.png"), ("#timelines", "report-timeline.png")):
        # the section's heading above the target in view too
        driver.execute_script(f"document.querySelector('{target}').scrollIntoView()")
        driver.execute_script("window.scrollBy(0, -60)")
        time.sleep(0.5)
        driver.save_screenshot(str(OUT / name))


def dashboard_shot(driver: Any, job: Path, work: Path) -> None:
    from stallscope.dashboard.app import Running, create_app
    from stallscope.dashboard.services import Services
    from stallscope.dashboard.store import Store
    from stallscope.dashboard.worker import analyse_entry

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in sorted(job.iterdir()):
            tar.add(f, arcname=f"{job.name}/{f.name}")
    store = Store(work / "store")
    entry = store.add(f"{job.name}.tar.gz", io.BytesIO(buf.getvalue()), 1 << 30)
    if analyse_entry(str(store.root), entry.id) != "ready":
        raise SystemExit(f"the dashboard could not analyse {job}: {store.get(entry.id).error}")
    running = Running(create_app(Services(store, None, 1 << 30)), "127.0.0.1", 0, quiet=True).start()
    try:
        driver.get(f"{running.url}/trace/{entry.id}/job")
        wait_for(driver, "return document.querySelector('#job-verdict')")
        wait_for(
            driver,
            "return document.querySelectorAll('#job-heatmap .heatmaplayer, #job-heatmap image').length",
        )
        time.sleep(1.0)
        driver.save_screenshot(str(OUT / "dashboard-job.png"))
    finally:
        running.stop()


def main(argv: list[str]) -> int:
    job = Path(argv[0]) if argv else DEFAULT_JOB
    if not job.is_dir():
        raise SystemExit(f"{job}: no such job folder")
    OUT.mkdir(parents=True, exist_ok=True)
    driver = browser()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report_shots(driver, job, Path(tmp))
            dashboard_shot(driver, job, Path(tmp))
    finally:
        driver.quit()
    for png in sorted(OUT.glob("*.png")):
        print(f"{png.relative_to(ROOT)} ({png.stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
