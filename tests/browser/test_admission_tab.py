"""The Admission tab in a real Locust web UI, driven by headless Debian Chromium.

Real parts end to end: a Kafka broker, the acceptor in front of it with connection
rate limits, a Locust web UI process running the storm profile against the
acceptor, and Chromium reading the tab. The tab must render, show the limits in
force as lines, and its numbers must move while the storm runs.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from base.localnet import free_port

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: the picture in docs/loadprofiles.md; refreshed only on request, so a test run leaves the
#: tree as it found it (HARNESS_UPDATE_SCREENSHOTS=1 pytest tests/browser)
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "admission-tab.png"

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's /usr/bin/chromium is absent"),
]


@pytest.fixture(scope="module")
def acceptor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from acceptor import start_in_thread
    from broker import start_broker

    broker = start_broker(launcher="local", workdir=tmp_path_factory.mktemp("kafka"))
    props = {
        "listeners": "CLIENT://127.0.0.1:0",
        "listener.name.client.upstream": broker.bootstrap,
        "metrics.port": "0",
        "quota.window.num": "2",
        "quota.window.size.seconds": "1",
        "max.connection.creation.rate": "20",
    }
    handle = start_in_thread(props, history_dir=tmp_path_factory.mktemp("history"), run_id="ui")
    handle.call(handle.acceptor.set_ip_quota, "127.0.0.9", 4)
    try:
        yield handle
    finally:
        handle.stop()
        broker.stop()


@pytest.fixture
def locust_ui(acceptor: Any, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "locust.log").open("w")
    locust = Path(sys.executable).with_name("locust")
    proc = subprocess.Popen(
        [
            str(locust),
            "-f",
            "loadprofiles/storm.py",
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
            "--host",
            f"kafka://{acceptor.bootstrap('CLIENT')}",
            "--metrics-url",
            acceptor.metrics_url,
            "--arrival",
            "constant:rate=30",
            "--source-ips",
            "127.0.0.7-127.0.0.9",
            "--max-lag-ms",
            "2000",
            "-u",
            "1",
            "-r",
            "1",
            "-t",
            "90s",
            "--autostart",
        ],
        cwd=Path(__file__).resolve().parents[2],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.3)
    else:
        proc.terminate()
        pytest.fail(f"Locust web UI did not listen; see {tmp_path / 'locust.log'}")
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def polls(page: Any) -> int:
    text = page.locator('#harness-admission [data-role="status"]').inner_text()
    m = re.search(r"polls (\d+)", text)
    return int(m.group(1)) if m else -1


def test_admission_tab_renders_limits_and_moving_numbers(locust_ui: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.goto(locust_ui, wait_until="domcontentloaded")
            page.get_by_role("tab", name="Admission").click()
            page.wait_for_url(re.compile(r"tab=admission"))
            chart = page.locator("#harness-admission")
            chart.wait_for(timeout=20_000)
            page.wait_for_function(
                "document.querySelectorAll('#harness-admission [data-role=series]').length > 0",
                timeout=30_000,
            )
            first = polls(page)
            table_before = page.locator("table").first.inner_text()
            # the storm offers 30/s against a 20/s broker rate: some get delayed
            page.wait_for_function(
                "/delayed [1-9]/.test(document.querySelector("
                "'#harness-admission [data-role=status]').textContent)",
                timeout=45_000,
            )
            page.wait_for_timeout(2500)
            later = polls(page)
            assert later > first >= 1
            # both limits in force are drawn as lines: the broker rate on the listener
            # chart, the 127.0.0.9 quota on the IP chart
            keys = page.locator('#harness-admission [data-role="limit"]').evaluate_all(
                "els => els.map(e => e.dataset.key)"
            )
            assert "max.connection.creation.rate" in keys
            assert "ip.connection_creation_rate.127.0.0.9" in keys
            table = page.locator("table").first.inner_text()
            assert "CLIENT" in table and "127.0.0.9" in table
            assert "max.connection.creation.rate=20" in table
            assert table != table_before  # the numbers moved between polls
            status = page.locator('#harness-admission [data-role="status"]').inner_text()
            accepted = float(re.search(r"accepted ([0-9.]+)/s", status).group(1))  # type: ignore[union-attr]
            assert accepted > 0
            shot = tmp_path / "admission-tab.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 0
            if os.environ.get("HARNESS_UPDATE_SCREENSHOTS") == "1":
                shutil.copyfile(shot, DOCS_SCREENSHOT)
        finally:
            browser.close()
