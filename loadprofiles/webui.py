"""The Admission tab of the Locust web UI: what the acceptor let in, live.

Every profile imports this module. It polls the acceptor's ``/metrics``
(``--metrics-url``, editable in the UI) once a second in a greenlet, turns the
counters into rates (``loadprofiles.admission``) and shows them through Locust's
documented extension points:

* an extended tab + table (``template_args["extendedTabs"/"extendedTables"]`` and an
  ``extendedStats`` entry added to ``/stats/requests``, as in Locust's
  ``examples/extend_web_ui.py``): accepted, delayed, throttle-closed and rejected
  connections/s per listener and for the busiest IPs, with the limit in force;
* routes on ``environment.web_ui.app``: ``/admission/data`` (JSON), ``/admission``
  (a full-page chart) and ``/admission/tab.js``, a small script added to the UI page
  that draws the rates as lines with the configured limits as dashed lines above the
  table while the tab is open.

Why poll the acceptor rather than count client outcomes: the tab is there to show
what the enforcer decided (its counters), next to Locust's own client-side stats.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
from locust import events
from locust.env import Environment

from loadprofiles.admission import OUTCOMES, AdmissionView

log = logging.getLogger("loadprofiles.webui")


def listen(event_name: str, fn: Callable[..., Any]) -> None:
    """Register ``fn`` on Locust's ``events.<event_name>`` (typed wrapper)."""
    hook: Any = getattr(events, event_name)
    hook.add_listener(fn)


TAB_KEY = "admission"
POLL_INTERVAL_S = 1.0
_JS = Path(__file__).with_name("admission_tab.js")

VIEW = AdmissionView()

_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Admission</title>
<style>body{font-family:sans-serif;margin:1em;background:#fff}</style></head>
<body data-admission-page="1"><h2>Admission (acceptor counters)</h2>
<div id="harness-admission-host"></div><script src="./admission/tab.js"></script></body></html>"""


def poll_once(url: str, view: AdmissionView, timeout_s: float = 2.0) -> None:
    """Fetch ``url`` and feed the view; failures are shown in the tab, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            text = resp.read().decode("utf-8", "replace")
    except Exception as exc:
        view.failed(f"{url}: {exc}")
        return
    try:
        view.ingest(text, time.monotonic())
    except ValueError as exc:
        view.failed(f"{url}: not Prometheus text ({exc})")


def _poller(environment: Environment) -> None:
    while True:
        url = getattr(environment.parsed_options, "metrics_url", "") or ""
        if url:
            poll_once(url, VIEW)
        gevent.sleep(POLL_INTERVAL_S)


def _install(environment: Environment, **_: Any) -> None:
    web_ui = environment.web_ui
    if web_ui is None or web_ui.app is None:
        return
    app = web_ui.app
    web_ui.template_args["extendedTabs"] = [{"title": "Admission", "key": TAB_KEY}]
    web_ui.template_args["extendedTables"] = [
        {
            "key": TAB_KEY,
            "structure": [
                {"key": "scope", "title": "Scope"},
                {"key": "name", "title": "Listener / IP"},
                *({"key": o, "title": f"{o.replace('_', '-')} /s"} for o in OUTCOMES),
                {"key": "limit", "title": "Limit in force (conn/s)"},
            ],
        }
    ]

    @app.route("/admission/data")
    def admission_data() -> Any:
        data = VIEW.snapshot()
        data["metrics_url"] = getattr(environment.parsed_options, "metrics_url", "")
        return app.response_class(json.dumps(data), mimetype="application/json")

    @app.route("/admission/tab.js")
    def admission_js() -> Any:
        return app.response_class(_JS.read_text(), mimetype="application/javascript")

    @app.route("/admission")
    def admission_page() -> Any:
        return app.response_class(_PAGE, mimetype="text/html")

    @app.after_request
    def _extend(response: Any) -> Any:
        from flask import request

        path = request.path.rstrip("/")
        if path.endswith("/stats/requests") and response.is_json:
            body = response.get_json()
            body["extendedStats"] = [{"key": TAB_KEY, "data": VIEW.table()}]
            response.set_data(json.dumps(body))
        elif (path == "" or path.endswith("/index.html")) and response.mimetype == "text/html":
            html = response.get_data(as_text=True)
            if "admission/tab.js" not in html and "</body>" in html:
                tag = '<script src="./admission/tab.js"></script></body>'
                response.set_data(html.replace("</body>", tag, 1))
        return response

    gevent.spawn(_poller, environment)
    log.info("admission tab: polling --metrics-url every %.0f s", POLL_INTERVAL_S)


listen("init", _install)
