"""A local OpenAI-compatible chat server for end-to-end runs over real HTTP: no network, no key.

`POST /v1/chat/completions` answers like the real API: a `json_schema` response_format request
gets a JSON instance of that schema, a `tools` request gets a call to the first tool, anything else
gets a short report citing the source ids in the prompt. The answers come from the same
ResearchResponder the in-process ScriptedChatModel uses, so the graph sees the same replies over
HTTP as in memory. Streamed requests are answered as server-sent events.

    python -m tests.fakes.openai_server [--port 0] [--latency 0.0]   # prints "PORT <n>"
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

from graph.testing import ResearchResponder


class _Handler(BaseHTTPRequestHandler):
    server: "FakeOpenAI"

    def log_message(self, *args: Any) -> None:  # quiet: tests read `calls` instead
        return

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            return self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        if not self.path.rstrip("/").endswith("/chat/completions"):
            return self._json(404, {"error": {"message": f"no route {self.path}"}})
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        if self.server.latency_s:
            time.sleep(self.server.latency_s)
        message = self.server.reply(body)
        prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
        usage = {"prompt_tokens": prompt_chars // 4 + 1,
                 "completion_tokens": len(json.dumps(message)) // 4 + 1}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        cid = "chatcmpl-" + uuid.uuid4().hex[:12]
        if body.get("stream"):
            return self._stream(cid, body.get("model", "fake-model"), message, finish, usage)
        self._json(200, {"id": cid, "object": "chat.completion", "created": int(time.time()),
                         "model": body.get("model", "fake-model"),
                         "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                         "usage": usage})

    def _json(self, status: int, data: dict) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _stream(self, cid: str, model: str, message: dict, finish: str, usage: dict) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        delta = {k: v for k, v in message.items() if v is not None}
        if "tool_calls" in delta:
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(delta["tool_calls"])]
        chunks = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                  {"choices": [], "usage": usage}]
        for c in chunks:
            c.update(id=cid, object="chat.completion.chunk", created=int(time.time()), model=model)
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


class FakeOpenAI(ThreadingHTTPServer):
    """The server; `calls` records (kind, start, end) for every completion."""

    daemon_threads = True

    def __init__(self, port: int = 0, latency_s: float = 0.0, responder: Any = None):
        super().__init__(("127.0.0.1", port), _Handler)
        self.latency_s = latency_s
        self.responder = responder or ResearchResponder(sufficient=True)
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def reply(self, body: dict) -> dict:
        messages = [SimpleNamespace(content=_content(m.get("content"))) for m in body.get("messages", [])]
        fmt = body.get("response_format") or {}
        tools = body.get("tools") or []
        if fmt.get("type") == "json_schema":
            kind, schema = "json_schema", fmt["json_schema"].get("name")
        elif tools:
            kind, schema = "tools", tools[0]["function"]["name"]
        else:
            kind, schema = "text", None
        with self._lock:
            self.calls.append({"kind": kind, "schema": schema, "ts": time.time()})
        answer = self.responder(messages, schema)
        if kind == "text":
            return {"role": "assistant", "content": answer if isinstance(answer, str) else json.dumps(answer)}
        data = answer if isinstance(answer, dict) else json.loads(answer)
        if kind == "json_schema":
            return {"role": "assistant", "content": json.dumps(data)}
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_" + uuid.uuid4().hex[:8], "type": "function",
             "function": {"name": schema, "arguments": json.dumps(data)}}]}

    def start(self) -> "FakeOpenAI":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def _content(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Local OpenAI-compatible chat server for tests")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.0)
    args = p.parse_args(argv)
    server = FakeOpenAI(args.port, args.latency)
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
