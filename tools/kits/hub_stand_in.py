"""A Hugging Face Hub stand-in on 127.0.0.1 that records repository creations and uploaded files.

`huggingface_hub` talks to it when `HF_ENDPOINT` points at it: it answers the repository-creation, pre-upload
and commit calls (every file uploaded inline, never through LFS) and keeps what each commit carried. Calls it
does not know are answered 404 and written down, so a test can see what the client asked for.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional


@dataclass
class HubRecord:
    created: List[dict] = field(default_factory=list)
    files: Dict[str, Dict[str, bytes]] = field(default_factory=dict)
    authorizations: List[str] = field(default_factory=list)
    unknown: List[str] = field(default_factory=list)
    # An HTTP status every call gets instead of an answer (a refused token, a server error), when set.
    fail_with: Optional[int] = None
    # With fail_with: name the request by the Authorization it carried (a proxy that echoes headers), so the
    # client's one-line error carries the token.
    echo_authorization: bool = False


def _handler(record: HubRecord) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # the test's output stays quiet
            return

        def _answer(self, status: int, body: object, request_id: str = "") -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            if request_id:
                self.send_header("X-Request-Id", request_id)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_GET(self) -> None:
            record.authorizations.append(self.headers.get("Authorization", ""))
            record.unknown.append(f"GET {self.path}")
            self._answer(404, {"error": "not found"})

        def do_POST(self) -> None:
            record.authorizations.append(self.headers.get("Authorization", ""))
            body = self._body()
            if record.fail_with is not None:
                echoed = self.headers.get("Authorization", "") if record.echo_authorization else ""
                self._answer(record.fail_with, {"error": "refused by the stand-in"}, request_id=echoed)
                return
            parts = self.path.split("?", 1)[0].strip("/").split("/")
            if parts[:3] == ["api", "repos", "create"]:
                request = json.loads(body)
                record.created.append(request)
                repo = f"{request.get('organization') or 'user'}/{request['name']}"
                self._answer(200, {"url": f"http://127.0.0.1/{repo}", "name": repo})
            elif len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "preupload":
                files = json.loads(body).get("files", [])
                answer = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
                self._answer(200, {"files": answer, "commitOid": "0" * 40})
            elif len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "commit":
                repo = f"{parts[2]}/{parts[3]}"
                for line in body.decode().splitlines():
                    item = json.loads(line)
                    if item.get("key") == "file":
                        value = item["value"]
                        record.files.setdefault(repo, {})[value["path"]] = base64.b64decode(value["content"])
                self._answer(200, {"commitUrl": f"http://127.0.0.1/{repo}/commit/{'1' * 40}", "commitOid": "1" * 40})
            else:
                record.unknown.append(f"POST {self.path}")
                self._answer(404, {"error": "not found"})

    return Handler


class HubStandIn:
    """`with HubStandIn() as hub:` serves on `hub.endpoint` until the block ends; `hub.record` holds the uploads."""

    def __init__(self) -> None:
        self.record = HubRecord()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.record))
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "HubStandIn":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
