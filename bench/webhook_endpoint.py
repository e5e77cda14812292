"""The sender rounds' endpoint: a WSGI app that reads the body and answers 200.

Served by gunicorn (``bench.webhook_endpoint:app``); no Django, so the
endpoint costs as little as it can and both sides of the comparison meet
the same server.
"""


def app(environ, start_response):
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]
