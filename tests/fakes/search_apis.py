"""Local stand-ins for the search APIs and for web pages, served over real HTTP on 127.0.0.1.

One threaded `http.server` answers every API under its own prefix, so providers are tested by
pointing their base URL at it:

    /tavily/search            Tavily      (Authorization: Bearer KEY)
    /serper/search            Serper      (X-API-KEY)
    /brave/res/v1/web/search  Brave       (X-Subscription-Token)
    /exa/search               Exa         (x-api-key)
    /searxng/search           SearXNG     (?format=json; /searxng-htmlonly answers 403 like a default instance)
    /openai/v1/responses      OpenAI Responses API with the web_search tool
    /pages/...                pages for the reader (HTML, charsets, PDF, text, binaries, big bodies)
    /redirect?to=URL          redirects; /chain/N redirects N times then lands on an article

Results are built from a small fixed pool of documents, each engine ranking them differently and
adding tracking parameters, so fusion and URL cleaning have real work to do. `script(path, Reply)`
queues one-off answers (errors, garbage, delays) that are served before the normal handler, and
every request is recorded so tests can count what reached the server.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

API_KEY = "fake-key-0123456789"

# (title, url, snippet, published) - a pool every fake engine draws from.
DOCS = [
    ("Reciprocal rank fusion explained", "https://ir.example.org/rrf", "RRF sums 1/(k+rank) over lists.", "2024-05-01"),
    ("Search engines compared", "https://www.compare.example.com/engines/", "A comparison of web search APIs.", "2023-11-12"),
    ("Canonical URLs and tracking", "https://urls.example.net/canonical", "Why utm parameters break dedup.", None),
    ("Circuit breakers in practice", "https://ops.example.org/breakers", "Open, half-open, closed.", "2022-02-02"),
    ("Reading pages safely", "https://sec.example.com/ssrf", "SSRF and DNS rebinding defences.", "2025-01-20"),
    ("BM25 for passages", "https://ir.example.org/bm25", "Okapi BM25 ranks short passages.", None),
    ("Backoff with jitter", "https://ops.example.org/jitter", "Full jitter spreads retries.", "2021-07-07"),
    ("SQLite WAL mode", "https://db.example.com/wal", "Readers do not block writers.", "2020-03-03"),
]
TRACKING = "utm_source=fake&utm_medium=api&fbclid=abc123"


def ranked_docs(engine: str, query: str) -> list[tuple[str, str, str, str | None]]:
    """The pool in an engine-specific order (rotation by engine), so engines overlap but differ."""
    shift = sum(map(ord, engine)) % len(DOCS)
    docs = DOCS[shift:] + DOCS[:shift]
    if "nothing" in query.lower():
        return []
    return docs


def tracked(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{TRACKING}#section"


@dataclass
class Reply:
    status: int = 200
    body: bytes | str | dict | list = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    chunks: int = 1            # stream the body in this many pieces
    chunk_delay_s: float = 0.0

    def encoded(self) -> bytes:
        if isinstance(self.body, (dict, list)):
            self.headers.setdefault("Content-Type", "application/json")
            return json.dumps(self.body).encode()
        if isinstance(self.body, str):
            return self.body.encode()
        return self.body


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body or b"null")


# ---------------------------------------------------------------- API handlers


def _unauthorized(message: str) -> Reply:
    return Reply(401, {"detail": {"error": message}})


def tavily(req: Recorded) -> Reply:
    if req.headers.get("authorization") != f"Bearer {API_KEY}":
        return _unauthorized("Unauthorized: missing or invalid API key.")
    body = req.json()
    n = min(int(body.get("max_results", 5)), 20)
    docs = ranked_docs("tavily", body["query"])[:n]
    results = [{"title": t, "url": tracked(u), "content": s, "score": round(0.9 - i * 0.05, 3),
                "raw_content": None, **({"published_date": d} if body.get("topic") == "news" and d else {})}
               for i, (t, u, s, d) in enumerate(docs)]
    return Reply(200, {"query": body["query"], "follow_up_questions": None, "answer": None, "images": [],
                       "results": results, "response_time": 0.42})


def serper(req: Recorded) -> Reply:
    if req.headers.get("x-api-key") != API_KEY:
        return Reply(403, {"message": "Unauthorized.", "statusCode": 403})
    body = req.json()
    n, page = int(body.get("num", 10)), int(body.get("page", 1))
    docs = ranked_docs("serper", body["q"])[(page - 1) * n: page * n]
    organic = [{"title": t, "link": tracked(u), "snippet": s, "position": (page - 1) * n + i + 1,
                **({"date": "Mar 3, 2024"} if d else {})} for i, (t, u, s, d) in enumerate(docs)]
    return Reply(200, {"searchParameters": {"q": body["q"], "type": "search", "engine": "google",
                                            "num": n, "page": page},
                       "organic": organic, "relatedSearches": [], "credits": 1})


def brave(req: Recorded) -> Reply:
    if req.headers.get("x-subscription-token") != API_KEY:
        return Reply(422, {"type": "ErrorResponse", "error": {"status": 422, "code": "SUBSCRIPTION_TOKEN_INVALID",
                                                              "detail": "The provided subscription token is invalid."}})
    q = req.query["q"][0]
    count, offset = int(req.query.get("count", ["20"])[0]), int(req.query.get("offset", ["0"])[0])
    docs = ranked_docs("brave", q)[offset * count:(offset + 1) * count]
    results = [{"title": t, "url": tracked(u), "description": f"<strong>{s}</strong> &amp; more",
                "type": "search_result", "page_age": f"{d}T10:00:00" if d else None,
                "age": "2 days ago" if d else None, "profile": {"name": "x"}} for t, u, s, d in docs]
    return Reply(200, {"type": "search", "query": {"original": q, "more_results_available": False},
                       "web": {"type": "search", "results": results}})


def exa(req: Recorded) -> Reply:
    if req.headers.get("x-api-key") != API_KEY:
        return _unauthorized("Invalid API key")
    body = req.json()
    docs = ranked_docs("exa", body["query"])[: int(body.get("numResults", 10))]
    results = [{"id": u, "title": t, "url": tracked(u), "publishedDate": f"{d}T00:00:00.000Z" if d else None,
                "author": None, "highlights": [s], "highlightScores": [0.5]} for t, u, s, d in docs]
    return Reply(200, {"requestId": "req-1", "resolvedSearchType": "neural", "results": results,
                       "costDollars": {"total": 0.005}})


def searxng(req: Recorded) -> Reply:
    if req.query.get("format", [""])[0] != "json":
        return Reply(403, "<html><body>403 Forbidden</body></html>", {"Content-Type": "text/html"})
    q = req.query["q"][0]
    page = int(req.query.get("pageno", ["1"])[0])
    docs = ranked_docs("searxng", q)[(page - 1) * 5: page * 5]
    results = [{"url": tracked(u), "title": t, "content": s, "engine": "google", "engines": ["google", "bing"],
                "score": 2.0 - i * 0.1, "category": "general", "publishedDate": f"{d}T00:00:00" if d else None}
               for i, (t, u, s, d) in enumerate(docs)]
    return Reply(200, {"query": q, "number_of_results": len(results), "results": results, "answers": [],
                       "suggestions": [], "unresponsive_engines": []})


def openai_responses(req: Recorded) -> Reply:
    if req.headers.get("authorization") != f"Bearer {API_KEY}":
        return Reply(401, {"error": {"message": "Incorrect API key provided: fa***89.", "type": "invalid_request_error",
                                     "code": "invalid_api_key"}})
    body = req.json()
    if not any(t.get("type") == "web_search" for t in body.get("tools", [])):
        return Reply(400, {"error": {"message": "web_search tool missing"}})
    docs = ranked_docs("openai", body["input"])[:3]
    text, annotations = "", []
    for t, u, s, _ in docs:
        sentence = f"{s} "
        link = f"([{t}]({u}?utm_source=openai))"
        start = len(text) + len(sentence)
        text += sentence + link + "\n\n"
        annotations.append({"type": "url_citation", "start_index": start, "end_index": start + len(link),
                            "url": f"{u}?utm_source=openai", "title": t})
    output = [
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": body["input"],
                    "sources": [{"type": "url", "url": u} for _, u, _, _ in ranked_docs("openai", body["input"])[:5]]}},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": text.strip(), "annotations": annotations}]},
    ]
    return Reply(200, {"id": "resp_1", "object": "response", "status": "completed", "model": body["model"],
                       "output": output, "usage": {"input_tokens": 10, "output_tokens": 50}})


# ---------------------------------------------------------------- pages for the reader


ARTICLE_TEXT = [
    "The harbour town of Port Avel rebuilt its sea wall in 2023 after two winter storms breached it.",
    "Engineers chose a stepped concrete profile that breaks waves before they reach the promenade, and "
    "the council funded the work with a bond approved by referendum.",
    "Fishermen say the new wall has already changed where sand settles inside the harbour mouth, so the "
    "dredging schedule moved from spring to late autumn.",
    "A monitoring station now records wave height every ten minutes and publishes the data openly.",
]


def article_html(title: str = "Port Avel rebuilds its sea wall", paragraphs: list[str] | None = None,
                 charset_meta: str | None = "utf-8") -> str:
    paras = "\n".join(f"<p>{p}</p>" for p in (paragraphs or ARTICLE_TEXT))
    meta = f'<meta charset="{charset_meta}">' if charset_meta else ""
    return f"""<!DOCTYPE html><html lang="en"><head>{meta}<title>{title} | Coast News</title>
<meta property="og:title" content="{title}">
<meta property="article:published_time" content="2024-03-05T08:00:00Z">
</head><body>
<nav><a href="/">Home</a> <a href="/world">World</a> <a href="/sport">Sport</a></nav>
<article><h1>{title}</h1>
{paras}
</article>
<footer>Copyright Coast News. <a href="/privacy">Privacy</a> <a href="/terms">Terms</a></footer>
</body></html>"""


def make_pdf(lines: list[str]) -> bytes:
    """A minimal valid one-page PDF showing `lines` in Helvetica (no PDF library needed)."""
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    ops = ["BT", "/F1 12 Tf", "72 720 Td", "14 TL"] + [f"({esc(line)}) Tj T*" for line in lines] + ["ET"]
    stream = zlib.compress("\n".join(ops).encode("latin-1"))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


PNG_BYTES = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
                          "0000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082")
CYRILLIC = ("Москва является столицей России и крупнейшим городом страны. Город расположен на реке "
            "Москве в центре Восточно-Европейской равнины. ") * 4


def pages(req: Recorded, base: str) -> Reply:
    name = req.path.removeprefix("/pages/")
    html = {"Content-Type": "text/html; charset=utf-8"}
    if name == "article.html":
        return Reply(200, article_html(), html)
    if name == "long.html":
        paras = [f"Paragraph {i}: " + " ".join(ARTICLE_TEXT) for i in range(40)]
        return Reply(200, article_html("A very long report", paras), html)
    if name == "latin1.html":  # charset only in <meta>, body really is latin-1
        body = article_html("Café culture in Zürich", ["Les crêpes du café coûtent très cher à Zürich, "
                                                       "déclare un économiste réputé. " * 3],
                            charset_meta="iso-8859-1").encode("latin-1")
        return Reply(200, body, {"Content-Type": "text/html"})
    if name == "cp1251.txt":  # no charset anywhere: detection has to guess
        return Reply(200, CYRILLIC.encode("cp1251"), {"Content-Type": "text/plain"})
    if name == "lying-header.html":  # header claims utf-8, bytes are latin-1
        body = article_html("Crème brûlée", ["La crème brûlée est un dessert français très apprécié. " * 3],
                            charset_meta=None).encode("latin-1")
        return Reply(200, body, html)
    if name == "bad-charset.html":  # an unknown codec name in the header
        return Reply(200, article_html().encode(), {"Content-Type": "text/html; charset=x-no-such-codec"})
    if name == "doc.pdf":
        return Reply(200, make_pdf(["Annual report 2024", "Revenue grew by twelve percent.",
                                    "The board approved a dividend."]), {"Content-Type": "application/pdf"})
    if name == "big.pdf":  # a real PDF padded past small size caps (a trailing comment)
        return Reply(200, make_pdf(["Big"]) + b"%" + b"x" * 50_000 + b"\n", {"Content-Type": "application/pdf"})
    if name == "notes.md":
        return Reply(200, "# Notes\n\n- first point\n- second point\n", {"Content-Type": "text/markdown"})
    if name == "data.json":
        return Reply(200, {"answer": 42, "items": ["a", "b"]})
    if name == "image.png":
        return Reply(200, PNG_BYTES, {"Content-Type": "image/png"})
    if name == "archive.zip":
        return Reply(200, b"PK\x03\x04" + bytes(200), {"Content-Type": "application/zip"})
    if name == "blob":
        return Reply(200, bytes(range(256)) * 4, {"Content-Type": "application/octet-stream"})
    if name == "sniff-pdf":  # a PDF served with a useless type
        return Reply(200, make_pdf(["Sniffed PDF body"]), {"Content-Type": "application/octet-stream"})
    if name == "big.txt":
        size = int(req.query.get("bytes", ["3000000"])[0])
        line = b"all work and no play makes a dull crawler\n"
        return Reply(200, (line * (size // len(line) + 1))[:size], {"Content-Type": "text/plain"}, chunks=20)
    if name == "empty.html":  # nothing a main-text extractor will call an article
        return Reply(200, "<html><head><title>Tiny</title></head><body><div>Just a line.</div></body></html>", html)
    if name == "slow.html":
        return Reply(200, article_html(), html, delay_s=float(req.query.get("s", ["2"])[0]))
    if name == "not-found":
        return Reply(404, "<h1>Not found</h1>", html)
    return Reply(404, "no such page", {"Content-Type": "text/plain"})


def redirect(req: Recorded, base: str) -> Reply:
    if req.path == "/redirect":
        code = int(req.query.get("code", ["302"])[0])
        return Reply(code, b"", {"Location": req.query["to"][0]})
    n = int(req.path.removeprefix("/chain/"))  # /chain/N -> /chain/N-1 -> ... -> article
    target = f"/chain/{n - 1}" if n > 1 else "/pages/article.html"
    return Reply(301, b"", {"Location": target})


# ---------------------------------------------------------------- the server


class FakeWeb:
    """A threaded HTTP server on 127.0.0.1 with every fake API and page; start once per session."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self.scheme = "http"

    # --- lifecycle
    def start(self, ssl_context=None) -> FakeWeb:
        """Serve in a daemon thread; with an `ssl.SSLContext`, serve HTTPS instead."""
        web = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                rec = Recorded(self.command, parts.path, parse_qs(parts.query),
                               {k.lower(): v for k, v in self.headers.items()}, body)
                reply = web._dispatch(rec)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                data = reply.encoded()
                try:
                    self.send_response(reply.status)
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        step = max(1, len(data) // max(1, reply.chunks))
                        for i in range(0, len(data), step):
                            self.wfile.write(data[i:i + step])
                            if reply.chunk_delay_s:
                                time.sleep(reply.chunk_delay_s)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading (size cap, timeout): that is the point

            do_GET = do_POST = do_HEAD = _handle

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        if ssl_context is not None:
            self._httpd.socket = ssl_context.wrap_socket(self._httpd.socket, server_side=True)
        self.scheme = "https" if ssl_context is not None else "http"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def port(self) -> int:
        assert self._httpd
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    # --- test controls
    def script(self, path: str, *replies: Reply) -> None:
        """Serve these replies, in order, to the next requests for `path` (before normal handling)."""
        with self._lock:
            self._scripts[path].extend(replies)

    def count(self, path: str) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.path == path)

    def last(self, path: str) -> Recorded:
        with self._lock:
            return [r for r in self.requests if r.path == path][-1]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._scripts.clear()

    # --- routing
    def _dispatch(self, rec: Recorded) -> Reply:
        with self._lock:
            self.requests.append(rec)
            queue = self._scripts.get(rec.path)
            if queue:
                return queue.popleft()
        routes = {
            "/tavily/search": tavily, "/serper/search": serper, "/brave/res/v1/web/search": brave,
            "/exa/search": exa, "/searxng/search": searxng, "/openai/v1/responses": openai_responses,
            "/searxng-htmlonly/search": lambda r: Reply(403, "Forbidden", {"Content-Type": "text/plain"}),
        }
        if rec.path in routes:
            try:
                return routes[rec.path](rec)
            except (KeyError, ValueError, TypeError) as e:
                return Reply(400, {"error": f"bad request: {e}"})
        if rec.path.startswith("/pages/"):
            return pages(rec, self.url)
        if rec.path == "/redirect" or rec.path.startswith("/chain/"):
            return redirect(rec, self.url)
        return Reply(404, {"error": "not found"})

    def base_urls(self) -> dict[str, str]:
        """Settings overrides that point every provider at this server."""
        return {"tavily_base_url": f"{self.url}/tavily", "serper_base_url": f"{self.url}/serper",
                "brave_base_url": f"{self.url}/brave", "exa_base_url": f"{self.url}/exa",
                "searxng_url": f"{self.url}/searxng", "openai_base_url": f"{self.url}/openai/v1"}


_shared: FakeWeb | None = None
_shared_lock = threading.Lock()


def shared_fake_web() -> FakeWeb:
    """One server per test process: module-level fixtures call this instead of starting their own."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = FakeWeb().start()
        return _shared
