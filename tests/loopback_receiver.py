"""A webhook receiver on 127.0.0.1 for the notification tests: a real http.server on a port of its
own, keeping every POST body it takes. `answers`: the status codes of the first POSTs (then 200);
`hold`: an Event the handler waits for before it answers (a receiver that is slow)."""
from __future__ import annotations

import http.server
import json
import threading
from typing import Optional

from json_documents import check


class Receiver:
    def __init__(self, answers: tuple = (), hold: Optional[threading.Event] = None):
        self.bodies: list[bytes] = []
        self.answers, self.hold, self.got_one = list(answers), hold, threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.got_one.set()
                if receiver.hold is not None:
                    receiver.hold.wait(30)
                code = receiver.answers.pop(0) if receiver.answers else 200
                if code == 200:
                    receiver.bodies.append(body)
                self.send_response(code)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T000/secret-path"

    def documents(self) -> list[dict]:
        """The bodies received; each in the JSON shape (Slack's has no "schema") checked against
        docs/schemas/notification.json."""
        found = [json.loads(b) for b in self.bodies]
        for document in found:
            if isinstance(document, dict) and "schema" in document:
                check("notification", document, "a JSON notification received")
        return found

    def __enter__(self) -> "Receiver":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()
