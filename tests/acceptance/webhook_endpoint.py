"""A webhook endpoint in its own process: the test URLconf's receiver, served.

``python -m tests.acceptance.webhook_endpoint PORT LOG [HOLD]`` serves
``tests.urls`` (its ``hooks/in/`` receiver verifies, dedupes into
``InboundDelivery`` and answers) with a threaded WSGI server on 127.0.0.1,
on the test database of ``tests.acceptance.worker_settings``. Each request
appends one JSON line to LOG: its ``webhook-id``, status and answer. While
the file HOLD exists, answers are held back (the receiver has committed;
the sender is still waiting), so a test can kill the sender mid-delivery.
The fault tests SIGKILL this process and start it again on the same port.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

HOLD_LIMIT_S = 60.0


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def main(port: int, log_path: str, hold: str | None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.acceptance.worker_settings")
    import django
    from django.core.wsgi import get_wsgi_application

    django.setup()
    app = get_wsgi_application()
    lock = threading.Lock()

    def logged(environ, start_response):
        captured = {}

        def keep(status, headers, exc_info=None):
            captured["status"] = status
            return start_response(status, headers, exc_info)

        body = b"".join(app(environ, keep))
        with lock, open(log_path, "a") as log:
            log.write(
                json.dumps(
                    {
                        "id": environ.get("HTTP_WEBHOOK_ID"),
                        "status": int(captured["status"].split()[0]),
                        "answer": body.decode("utf-8", "replace"),
                    }
                )
                + "\n"
            )
        deadline = time.monotonic() + HOLD_LIMIT_S
        while hold and os.path.exists(hold) and time.monotonic() < deadline:
            time.sleep(0.05)
        return [body]

    server = make_server("127.0.0.1", port, logged, _Server, _QuietHandler)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
