"""``roll view RUN_DIR --serve``: the report on localhost, rebuilt on every page load so a
reload shows a running job's latest steps. Bound to 127.0.0.1 only: run data is not served
to the network."""
from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from roll.utils.logging import get_logger
from roll.viewer.report import render_html
from roll.viewer.run_data import load_run

logger = get_logger("roll.viewer.server")


def make_server(run_dir: Path | str, port: int = 8765, host: str = "127.0.0.1",
                max_trajectory_steps: int | None = 40) -> ThreadingHTTPServer:
    """A server for the report of ``run_dir`` (``port=0`` picks a free port)."""
    load_run(run_dir, max_trajectory_steps=0)  # a wrong path fails here, before anything listens
    build: Callable[[], str] = lambda: render_html(load_run(run_dir, max_trajectory_steps=max_trajectory_steps))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/", "/index.html", "/report.html"):
                self.send_error(404, "the report is at /")
                return
            body = build().encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:
            logger.debug("%s " + format, self.address_string(), *args)

    return ThreadingHTTPServer((host, port), Handler)


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="roll-view", daemon=True)
    thread.start()
    return thread
