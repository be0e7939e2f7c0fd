"""read_page(url): safety checks -> fetch -> extract -> markdown, read in windows.

Safety (SSRF): only http/https; every host name is resolved by us and every address it resolves to
must be public. The check runs inside the connection layer (a custom httpcore network backend), so
it covers the first request and every redirect, and the socket is opened to the very address that
was checked: a DNS answer that changes between check and connect (rebinding) cannot slip through.
TLS still verifies the certificate for the host name, because httpcore does the handshake with the
original host as SNI. Proxies from the environment are ignored for the same reason.

Blocking work (charset detection, trafilatura, pypdf) runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import codecs
import io
import ipaddress
import logging
import os
import re
import select
import shutil
import socket
import ssl
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import certifi
import httpcore
import httpx

from tools.base import (InvalidInput, PageContent, ParseError, ProviderError, ProviderTimeout,
                        RateLimitError, UnsafeURLError)
from tools.cache import get_cache
from tools.http import parse_retry_after, timeout_from
from tools.settings import ToolSettings, get_tool_settings
from tools.urls import canonical_url

log = logging.getLogger("deep_research.tools.reader")

MAX_WINDOW_CHARS = 200_000
Resolver = Callable[[str, int], Awaitable[list[str]]]

# ---------------------------------------------------------------- address policy

# Cloud instance-metadata endpoints (AWS/GCP/Azure/OpenStack, AWS IPv6, ECS tasks, Alibaba, Oracle):
# named explicitly so the refusal message says what they are.
METADATA_ADDRESSES = frozenset({"169.254.169.254", "fd00:ec2::254", "169.254.170.2", "169.254.170.23",
                                "100.100.100.200", "192.0.0.192"})
BLOCKED_NAMES = frozenset({"localhost", "metadata.google.internal", "metadata.goog", "metadata"})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def unsafe_reason(ip: str) -> str | None:
    """Why an address must not be fetched ("a private address", ...), or None when it is public."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if str(addr) in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(addr, ipaddress.IPv6Address):
        # IPv6 forms that carry an IPv4 address reach that IPv4 host: judge the inner address.
        inner = addr.ipv4_mapped or addr.sixtofour or (addr.teredo[1] if addr.teredo else None)
        if inner is None and addr in _NAT64:
            inner = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        if inner is not None:
            return unsafe_reason(str(inner))
    for attr, reason in (("is_loopback", "a loopback address"), ("is_link_local", "a link-local address"),
                         ("is_multicast", "a multicast address"), ("is_unspecified", "an unspecified address"),
                         ("is_private", "a private address"), ("is_reserved", "a reserved address")):
        if getattr(addr, attr):
            return reason
    if not addr.is_global:
        return "an address that is not publicly routable"
    return None


def _refuse(host: str, why: str) -> UnsafeURLError:
    return UnsafeURLError(
        f"refused to fetch {host}: it is {why}. Pages on private networks are off limits by default; "
        "set DEEP_RESEARCH_ALLOW_PRIVATE_URLS=true only for local use you trust", provider="reader")


def check_url_syntax(url: str, allow_private: bool) -> str:
    """Refuse what needs no DNS: non-http(s) schemes, missing hosts, private literal IPs, local names."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise UnsafeURLError(f"refused {url[:100]!r}: only http and https URLs can be read", provider="reader")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise InvalidInput(f"not an absolute URL: {url[:200]!r}", provider="reader")
    if allow_private:
        return host
    if host in BLOCKED_NAMES or host.endswith(".localhost"):
        raise _refuse(host, "a local host name")
    try:
        why = unsafe_reason(host)
    except ValueError:
        return host  # a name: checked when resolved
    if why:
        raise _refuse(host, why)
    return host


async def system_resolve(host: str, port: int) -> list[str]:
    """All addresses of `host` from the system resolver, without blocking the loop."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def _socket_readable(sock: socket.socket | None) -> bool:
    """True when a read would not block: data or EOF waiting (a closed socket counts as readable)."""
    fd = sock.fileno() if sock is not None else -1
    if fd < 0:
        return True
    if not hasattr(select, "poll"):  # Windows
        return bool(select.select([fd], [], [], 0)[0])
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class ProbedStream(httpcore.AsyncNetworkStream):
    """httpcore's AnyIO stream, answering the pool's "is_readable" probe from the socket directly.

    The pool probes every connection it holds each time it assigns a request (several times per
    request), and anyio rebuilds its whole attribute table (getpeername included) for each lookup:
    with a round's 10-20 page reads in flight that bookkeeping cost as much CPU as parsing a page.
    The answer is the same: the raw TCP socket's readability, under TLS too.
    """

    def __init__(self, inner: httpcore.AsyncNetworkStream):
        self._inner = inner
        self._sock = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        return ProbedStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str):
        if info == "is_readable":
            return _socket_readable(self._sock)
        return self._inner.get_extra_info(info)


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves, checks, then connects to the checked address (never re-resolving the name).

    `route` maps a checked address to the one actually dialled; only tests use it, to reach a
    local server while the policy sees a public address.
    """

    def __init__(self, allow_private: bool, resolve: Resolver = system_resolve,
                 route: Callable[[str], str] | None = None, resolve_timeout_s: float = 5.0):
        self.allow_private = allow_private
        self.resolve = resolve
        self.route = route
        self.resolve_timeout_s = resolve_timeout_s
        self._inner = httpcore.AnyIOBackend()

    async def checked_addresses(self, host: str, port: int) -> list[str]:
        try:
            ipaddress.ip_address(host)
            addresses = [host]
        except ValueError:
            try:
                async with asyncio.timeout(self.resolve_timeout_s):
                    addresses = await self.resolve(host, port)
            except (OSError, TimeoutError) as e:
                raise ProviderError(f"cannot resolve {host} ({e.__class__.__name__}): check the URL",
                                    provider="reader") from None
        if not addresses:
            raise ProviderError(f"cannot resolve {host}: no addresses", provider="reader")
        if not self.allow_private:
            for ip in addresses:  # one bad answer taints the name: rebinding setups mix them
                why = unsafe_reason(ip)
                if why:
                    raise _refuse(host, f"resolving to {ip}, {why}")
        return addresses

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options=None) -> httpcore.AsyncNetworkStream:
        error: Exception | None = None
        for ip in await self.checked_addresses(host, port):
            target = self.route(ip) if self.route else ip
            try:
                return ProbedStream(await self._inner.connect_tcp(
                    target, port, timeout=timeout, local_address=local_address, socket_options=socket_options))
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as e:
                error = e
        assert error is not None
        raise error

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options=None):
        raise UnsafeURLError("unix sockets are never read", provider="reader")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport with its connection pool swapped for one on a GuardedBackend.

    httpx has no public hook for a network backend; replacing `_pool` keeps httpx's own
    request/response and exception mapping, and the reader tests exercise this path end to end.
    """

    def __init__(self, backend: GuardedBackend, ssl_context: ssl.SSLContext, max_connections: int = 100):
        super().__init__(verify=ssl_context, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context, max_connections=max_connections, max_keepalive_connections=20,
            keepalive_expiry=30.0, network_backend=backend)


def make_reader_client(settings: ToolSettings, *, resolve: Resolver = system_resolve,
                       route: Callable[[str], str] | None = None,
                       ssl_context: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    """An httpx client whose every connection goes through the address policy of `settings`."""
    backend = GuardedBackend(settings.allow_private_urls, resolve, route, settings.connect_timeout_s)
    ctx = ssl_context or ssl.create_default_context(cafile=certifi.where())
    return httpx.AsyncClient(
        transport=GuardedTransport(backend, ctx), follow_redirects=False, trust_env=False,
        timeout=timeout_from(settings),
        headers={"User-Agent": settings.user_agent,
                 "Accept": "text/html,application/xhtml+xml,application/pdf;q=0.9,text/plain;q=0.8,*/*;q=0.5",
                 "Accept-Language": "en;q=0.9,*;q=0.5"})


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[bool, httpx.AsyncClient]] = \
    weakref.WeakKeyDictionary()


def shared_reader_client(settings: ToolSettings) -> httpx.AsyncClient:
    """One pooled reader client per event loop and address policy (so 50 reads share connections)."""
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    client = per_loop.get(settings.allow_private_urls)
    if client is None or client.is_closed:
        client = per_loop[settings.allow_private_urls] = make_reader_client(settings)
    return client


# ---------------------------------------------------------------- fetching


@dataclass
class Fetched:
    final_url: str
    content_type: str
    body: bytes
    cut: bool  # the body hit max_page_bytes


REDIRECTS = {301, 302, 303, 307, 308}
_REFUSED_PREFIXES = ("image/", "audio/", "video/", "font/", "model/")
_SNIFFABLE = {"", "application/octet-stream", "binary/octet-stream", "application/unknown"}
_TEXT_TYPES = {"application/json", "application/ld+json", "application/xml", "application/rss+xml",
               "application/atom+xml", "application/javascript", "application/x-yaml", "application/yaml",
               "application/x-ndjson", "application/csv"}


def _mime(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _status_error(url: str, resp: httpx.Response) -> Exception:
    code = resp.status_code
    if code == 429:
        return RateLimitError(f"{url} is rate limiting us (HTTP 429); try later",
                              provider="reader", retry_after=parse_retry_after(resp.headers.get("Retry-After")))
    what = {401: "requires a login", 403: "refused access", 404: "was not found", 410: "is gone"}.get(
        code, "failed on the server side" if code >= 500 else "refused the request")
    return ProviderError(f"{url} {what} (HTTP {code})", provider="reader")


async def _read_capped(resp: httpx.Response, limit: int) -> tuple[bytes, bool]:
    buf = bytearray()
    async for chunk in resp.aiter_bytes():  # decoded bytes: a gzip bomb hits the cap too
        buf += chunk
        if len(buf) >= limit:
            return bytes(buf[:limit]), True
    return bytes(buf), False


async def fetch(client: httpx.AsyncClient, url: str, settings: ToolSettings) -> Fetched:
    """GET `url`, following at most max_redirects redirects by hand, each hop re-checked."""
    current = url
    for _ in range(settings.max_redirects + 1):
        check_url_syntax(current, settings.allow_private_urls)
        async with client.stream("GET", current, timeout=timeout_from(settings)) as resp:
            if resp.status_code in REDIRECTS and resp.headers.get("location"):
                current = urljoin(str(resp.url), resp.headers["location"].strip())
                continue
            if resp.status_code >= 400:
                raise _status_error(current, resp)
            ctype = resp.headers.get("content-type", "")
            mime = _mime(ctype)
            if mime.startswith(_REFUSED_PREFIXES) or mime in {"application/zip", "application/gzip",
                                                             "application/x-tar", "application/x-7z-compressed"}:
                raise _unsupported(current, mime)  # refuse before downloading it
            length = resp.headers.get("content-length", "")
            if mime == "application/pdf" and length.isdigit() and int(length) > settings.max_page_bytes:
                raise ParseError(f"cannot read {current}: the PDF is larger than {settings.max_page_bytes} bytes "
                                 "(DEEP_RESEARCH_MAX_PAGE_BYTES)", provider="reader")
            body, cut = await _read_capped(resp, settings.max_page_bytes)
            return Fetched(str(resp.url), ctype, body, cut)
    raise ProviderError(f"{url} redirected more than {settings.max_redirects} times", provider="reader")


def _unsupported(url: str, what: str) -> ParseError:
    return ParseError(f"cannot read {url}: it is {what or 'binary data'}; only HTML, PDF and text pages can be read",
                      provider="reader")


# ---------------------------------------------------------------- decoding and extraction

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.IGNORECASE)
# Browsers read these labels as windows-1252; pages rely on it (curly quotes in "latin-1" pages).
_HTML_ALIASES = {"iso-8859-1": "cp1252", "latin-1": "cp1252", "latin1": "cp1252", "ascii": "cp1252",
                 "us-ascii": "cp1252", "iso8859-1": "cp1252"}


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    name = name.strip().strip("\"'").lower()
    name = _HTML_ALIASES.get(name, name)
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def decode(body: bytes, content_type: str = "", *, cut: bool = False) -> str:
    """Text of `body`: the header's charset, then a BOM, then <meta>, then charset-normalizer."""
    header = re.search(r"charset\s*=\s*[\"']?([^\s;\"']+)", content_type, re.IGNORECASE)
    candidates = [_codec(header.group(1)) if header else None]
    for bom, enc in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if body.startswith(bom):
            candidates.insert(0, enc)
    meta = _META_CHARSET.search(body[:4096])
    candidates.append(_codec(meta.group(1).decode("ascii", "ignore")) if meta else None)
    for enc in filter(None, dict.fromkeys(candidates)):
        try:  # incremental with final=False: a body cut mid-character still decodes
            return codecs.getincrementaldecoder(enc)("strict").decode(body, final=not cut)
        except UnicodeDecodeError:
            continue
    from charset_normalizer import from_bytes

    matches = list(from_bytes(body[:500_000]))
    encoding = matches[0].encoding if matches else "utf-8"
    # Short Western texts often fit several single-byte codecs equally well; the web's usual
    # legacy charset (the WHATWG default) breaks the tie.
    if any(m.chaos == matches[0].chaos and "cp1252" in m.could_be_from_charset for m in matches):
        encoding = "cp1252"
    return body.decode(encoding, errors="replace")


def _looks_like_html(text_start: bytes) -> bool:
    head = text_start[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<body" in head


def classify(content_type: str, body: bytes) -> str | None:
    """"html", "pdf" or "text" for what we can read, None for what we refuse."""
    mime = _mime(content_type)
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime == "application/pdf" or body.startswith(b"%PDF-"):
        return "pdf"
    if mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return "text"
    if mime in _SNIFFABLE:
        if _looks_like_html(body):
            return "html"
        if b"\x00" not in body[:4096]:
            return "text"
    return None


_TITLE_TAG = re.compile(r"<title[^>]*>(.*?)</title>", re.DOTALL | re.IGNORECASE)
_MD_OPTIONS = {"output_format": "markdown", "include_comments": False, "include_tables": True,
               "include_formatting": True, "include_links": False, "include_images": False, "fast": True}
# What a page's text can hold at most, as markdown: every character of its body's text nodes plus
# what markdown adds (escapes, list marks, table bars). Measured on the article-extraction set the
# recall text never exceeds 0.9x the body's text; 1.25 leaves room.
_MARKDOWN_OVERHEAD = 1.25


def extract(html: str, url: str | None = None) -> tuple[str, str | None, str]:
    """(title, published_date, markdown_text) of an HTML page; the text is never None.

    trafilatura in precision mode scores best on the article benchmark, but now and then it drops
    most of an article; recall mode then keeps it. We take the precise text unless it is less than
    half of the recall text, and skip the recall pass when the precise text already holds more than
    half of all the text the page has (recall cannot double it). When both find nothing:
    trafilatura's baseline, then all visible text.

    Cost, which lands on every research round (a round's pages arrive together and share one GIL):
    the page is parsed once and trafilatura copies the tree for each pass; both passes run in
    trafilatura's fast mode (no readability/justext comparison: half the CPU, and on the article set
    the same recall on every page and a slightly higher F1); title and date come from a metadata
    pass limited to them (the full one also derives author, site name, tags, license and a content
    fingerprint, which we never used).
    """
    import trafilatura
    from trafilatura.utils import load_html

    tree = load_html(html)
    text = ""
    if tree is not None:
        text = (trafilatura.extract(tree, url=url, favor_precision=True, **_MD_OPTIONS) or "").strip()
        if len(text) < 0.5 * _body_chars(tree) * _MARKDOWN_OVERHEAD:
            recall = (trafilatura.extract(tree, url=url, favor_recall=True, **_MD_OPTIONS) or "").strip()
            if len(text) < 0.5 * len(recall):
                text = recall
    if not text:
        _, base_text, _ = trafilatura.baseline(html)
        text = (base_text or "").strip() or trafilatura.html2txt(html).strip()
    title, date = page_metadata(tree, url) if tree is not None else ("", None)
    if not title:
        m = _TITLE_TAG.search(html[:20_000])
        title = " ".join(m.group(1).split()) if m else ""
    return title, date, text


def _body_chars(tree) -> int:
    """Characters of text under <body> (scripts and styles included: an upper bound is what we need)."""
    body = tree.find(".//body")
    return sum(len(t) for t in (body if body is not None else tree).itertext())


def page_metadata(tree, url: str | None) -> tuple[str, str | None]:
    """(title, date) as trafilatura's metadata pass finds them: <meta> tags and JSON-LD first, then
    <title>/<h1>, cleaned the same way; the date from htmldate's header pass (meta tags, structured
    data, <time>, the URL), original date first.

    htmldate's extensive search, which also scans the body for a byline like "published on 25
    September 2018", costs 16 ms per page on the 181 annotated pages against 0.8 ms for the header
    pass, and gives the same date on 179 of them (on the other 2 the header pass finds none)."""
    from html import unescape

    from htmldate import find_date
    from trafilatura.metadata import examine_meta, extract_meta_json, extract_title
    from trafilatura.settings import set_date_params
    from trafilatura.utils import line_processing

    meta = examine_meta(tree)
    try:
        meta = extract_meta_json(tree, meta)
    except Exception:  # trafilatura guards its own JSON-LD parser the same way
        pass
    title = line_processing(unescape(meta.title or extract_title(tree) or "")) or ""
    try:
        date = find_date(tree, **{**set_date_params(True), "extensive_search": False, "url": meta.url or url})
    except Exception:  # a malformed date in one page must not cost the page its text
        date = None
    return title, date


def pdf_text(body: bytes) -> tuple[str, str | None, str]:
    """(title, date, text) of a PDF, page by page."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(body))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ParseError("the PDF is password-protected", provider="reader")
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
        meta = reader.metadata
        title = (meta.title or "") if meta else ""
        date = meta.creation_date.date().isoformat() if meta and meta.creation_date else None
    except (PdfReadError, ValueError, KeyError, TypeError) as e:
        raise ParseError(f"the PDF could not be parsed ({e.__class__.__name__})", provider="reader") from None
    return title, date, "\n\n".join(p for p in pages if p)


@dataclass
class Extracted:
    final_url: str
    title: str
    published_date: str | None
    text: str
    content_type: str
    cut: bool


def process(fetched: Fetched, settings: ToolSettings) -> Extracted:
    """Turn a fetched body into text (runs in a worker thread)."""
    kind = classify(fetched.content_type, fetched.body)
    url, mime = fetched.final_url, _mime(fetched.content_type) or "unknown"
    if kind is None:
        raise _unsupported(url, mime)
    if kind == "pdf":
        if fetched.cut:
            raise ParseError(f"cannot read {url}: the PDF is larger than {settings.max_page_bytes} bytes "
                             "(DEEP_RESEARCH_MAX_PAGE_BYTES)", provider="reader")
        try:
            title, date, text = pdf_text(fetched.body)
        except ParseError as e:
            raise ParseError(f"cannot read {url}: {e.message}", provider="reader") from None
        return Extracted(url, title, date, text, "application/pdf", False)
    text = decode(fetched.body, fetched.content_type, cut=fetched.cut)
    if kind == "html":
        title, date, text = extract(text, url)
        return Extracted(url, title, date, text, "text/html", fetched.cut)
    return Extracted(url, "", None, text.strip(), mime, fetched.cut)


# ---------------------------------------------------------------- JS rendering (optional)


async def render(url: str, settings: ToolSettings, backend: GuardedBackend) -> Fetched:
    """Fetch through headless Chromium (Playwright), refusing any request to a non-public host."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        raise ProviderError("render_js is on but Playwright is not installed: install the 'render' extra "
                            "(pip install 'deep-research-mcp[render]') or set DEEP_RESEARCH_RENDER_JS=false",
                            provider="reader") from None

    async def guard(route, request):
        try:
            host = check_url_syntax(request.url, settings.allow_private_urls)
            await backend.checked_addresses(host, urlsplit(request.url).port or 443)
        except (UnsafeURLError, ProviderError, InvalidInput):
            await route.abort()
            return
        await route.continue_()

    executable = settings.chromium_path or shutil.which("chromium") or shutil.which("chromium-browser")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable, headless=True)
        try:
            page = await browser.new_page(user_agent=settings.user_agent)
            await page.route("**/*", guard)
            await page.goto(url, wait_until="networkidle", timeout=settings.total_timeout_s * 1000)
            html = await page.content()
            return Fetched(page.url, "text/html; charset=utf-8", html.encode(), False)
        finally:
            await browser.close()


# ---------------------------------------------------------------- the public function


def window(doc: Extracted, url: str, start_char: int, max_chars: int) -> PageContent:
    """The [start_char, start_char + max_chars) slice, ended at a word boundary when possible."""
    text, total = doc.text, len(doc.text)
    start = min(start_char, total)
    end = min(start + max_chars, total)
    if end < total:
        lo = start + max_chars // 2  # do not cut a word in half
        space = max(text.rfind(" ", lo, end), text.rfind("\n", lo, end))
        end = space + 1 if space > start else end
    more = end < total or (doc.cut and start < total)
    return PageContent(url=url, final_url=doc.final_url, title=doc.title, published_date=doc.published_date,
                       text=text[start:end], start_char=start, total_chars=total, truncated=more,
                       content_type=doc.content_type)


async def read_page(url: str, max_chars: int = 8000, start_char: int = 0, *,
                    settings: ToolSettings | None = None, client: httpx.AsyncClient | None = None) -> PageContent:
    """Read a web page (HTML, PDF or text) as markdown, `max_chars` at a time from `start_char`.

    Raises UnsafeURLError for refused addresses, InvalidInput for bad arguments, ProviderError,
    ProviderTimeout, RateLimitError or ParseError when the page cannot be fetched or read.
    """
    s = settings or get_tool_settings()
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("url is empty: give an http(s) URL", provider="reader")
    if not 1 <= max_chars <= MAX_WINDOW_CHARS:
        raise InvalidInput(f"max_chars must be between 1 and {MAX_WINDOW_CHARS}", provider="reader")
    if start_char < 0:
        raise InvalidInput("start_char must be 0 or more", provider="reader")
    check_url_syntax(url.strip(), s.allow_private_urls)
    clean = canonical_url(url)

    cache = get_cache(s)
    key = {"url": clean, "render_js": s.render_js}
    cached = await cache.get("page", key) if cache else None
    try:
        doc = Extracted(**cached) if isinstance(cached, dict) else None
    except TypeError:  # written by another version of this code: fetch again
        doc = None
    if doc is None:
        doc = await _fetch_and_extract(clean, s, client)
        if cache:
            await cache.set("page", key, doc.__dict__, ttl_s=s.cache_ttl_s)
    doc.final_url = canonical_url(doc.final_url)
    return window(doc, clean, start_char, max_chars)


async def _fetch_and_extract(url: str, s: ToolSettings, client: httpx.AsyncClient | None) -> Extracted:
    client = client or shared_reader_client(s)
    try:
        async with asyncio.timeout(s.total_timeout_s):
            if s.render_js:
                backend = GuardedBackend(s.allow_private_urls)
                fetched = await render(url, s, backend)
            else:
                fetched = await fetch(client, url, s)
    except (httpx.TimeoutException, TimeoutError):
        raise ProviderTimeout(f"reading {url} took too long (limit {s.total_timeout_s}s); try again or skip it",
                              provider="reader") from None
    except httpx.HTTPError as e:
        raise ProviderError(f"could not fetch {url} ({e.__class__.__name__}: {e})", provider="reader") from None
    log.debug("fetched %s (%d bytes, %s)", fetched.final_url, len(fetched.body), fetched.content_type)
    return await extract_off_loop(fetched, s)


# -- where extraction runs ---------------------------------------------------------------------------
# Extraction is CPU work (a few ms for a small page, tens for a large one) and a round's pages arrive
# together. In a thread it shares the event loop's GIL, so a busy server's every step waits behind
# it; worker processes take it off that core. Each worker costs about 80 MB, so the CLI and a stdio
# server keep the thread (DEEP_RESEARCH_EXTRACT_PROCESSES=0) and an HTTP server defaults to workers.

_pool: Any = None  # concurrent.futures.ProcessPoolExecutor once used
_pool_size = 0


def extract_pool(n: int) -> Any:
    """The shared pool of `n` extraction processes (forkserver: forking a process that runs threads
    and an event loop is unsafe)."""
    global _pool, _pool_size
    if _pool is None or _pool_size != n:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=False)
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["tools.reader", "trafilatura", "htmldate"])
        _pool = ProcessPoolExecutor(n, mp_context=ctx, initializer=_exit_with, initargs=(os.getpid(),))
        _pool_size = n
    return _pool


def _exit_with(server_pid: int) -> None:
    """In each worker: exit when the server is gone. A pool's workers are told to stop by the server;
    one that was killed (kill -9, OOM) tells them nothing, and they would wait for work forever."""
    import threading
    import time

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(server_pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except OSError:  # EPERM: it exists
                pass

    threading.Thread(target=watch, name="exit-with-server", daemon=True).start()


def warm_extract_pool(settings: ToolSettings | None = None) -> None:
    """Start the extraction workers now, so the first research does not pay their start-up."""
    s = settings or get_tool_settings()
    if s.extract_processes:
        pool = extract_pool(s.extract_processes)
        for f in [pool.submit(_worker_ready) for _ in range(s.extract_processes)]:
            f.result(timeout=60)


def _worker_ready() -> bool:
    import trafilatura  # noqa: F401  (preloaded by the forkserver; this only makes sure)

    return True


async def extract_off_loop(fetched: Fetched, s: ToolSettings) -> Extracted:
    """`process` in a worker process when configured, else in a thread; a broken pool (a worker was
    killed) is replaced, and this page is read in a thread meanwhile."""
    global _pool
    if s.extract_processes:
        from concurrent.futures.process import BrokenProcessPool

        try:
            return await asyncio.get_running_loop().run_in_executor(
                extract_pool(s.extract_processes), process, fetched, s)
        except BrokenProcessPool:
            log.warning("an extraction worker died; starting new ones (this page is read in a thread)")
            _pool = None
    return await asyncio.to_thread(process, fetched, s)
