"""The page reader against real local servers: safety, limits, charsets, formats, windowing, cache."""

import asyncio
import datetime
import importlib.util
import ipaddress
import ssl

import pytest

from tests.fakes.search_apis import FakeWeb, shared_fake_web
from tools.base import InvalidInput, ParseError, ProviderError, ProviderTimeout, UnsafeURLError
from tools.reader import extract, make_reader_client, read_page, system_resolve, unsafe_reason
from tools.settings import ToolSettings

PUBLIC_IP = "93.184.215.14"  # a global address; tests route it to 127.0.0.1
FAKE_DNS = {"public.test": [PUBLIC_IP], "private.test": ["10.0.0.5"], "meta.test": ["169.254.169.254"],
            "rebind.test": [PUBLIC_IP, "192.168.1.1"], "mapped.test": ["::ffff:127.0.0.1"]}


@pytest.fixture(scope="module")
def web():
    return shared_fake_web()


@pytest.fixture
def open_settings(tmp_path):
    """The fake server is on 127.0.0.1, so happy paths run with private addresses allowed."""
    return ToolSettings(allow_private_urls=True, cache_enabled=False, data_dir=tmp_path, total_timeout_s=5)


@pytest.fixture
def closed_settings(tmp_path):
    return ToolSettings(allow_private_urls=False, cache_enabled=False, data_dir=tmp_path, total_timeout_s=5)


class Network:
    """Injected DNS and routing: names resolve per FAKE_DNS; the public IP is dialled as 127.0.0.1."""

    def __init__(self):
        self.dialled: list[str] = []

    async def resolve(self, host, port):
        return FAKE_DNS[host] if host in FAKE_DNS else await system_resolve(host, port)

    def route(self, ip):
        self.dialled.append(ip)
        return "127.0.0.1" if ip == PUBLIC_IP else ip


@pytest.fixture
async def guarded(closed_settings):
    net = Network()
    client = make_reader_client(closed_settings, resolve=net.resolve, route=net.route)
    yield net, client
    await client.aclose()


# ---------------------------------------------------------------- happy paths


async def test_reads_an_article_as_clean_markdown(web, open_settings):
    page = await read_page(f"{web.url}/pages/article.html?utm_source=x#top", settings=open_settings)
    assert page.url == page.final_url == f"{web.url}/pages/article.html"
    assert page.title == "Port Avel rebuilds its sea wall"
    assert page.published_date == "2024-03-05"
    assert "stepped concrete profile" in page.text and "monitoring station" in page.text
    assert "Privacy" not in page.text and "Sport" not in page.text  # boilerplate gone
    assert page.content_type == "text/html" and not page.truncated
    assert page.total_chars == len(page.text)


@pytest.mark.parametrize("path, expected", [
    ("/pages/latin1.html", "Les crêpes du café coûtent très cher à Zürich"),
    ("/pages/lying-header.html", "La crème brûlée est un dessert"),
    ("/pages/bad-charset.html", "stepped concrete profile"),
    ("/pages/cp1251.txt", "Москва является столицей России"),
])
async def test_charsets_decode(web, open_settings, path, expected):
    page = await read_page(web.url + path, settings=open_settings)
    assert expected in page.text


@pytest.mark.parametrize("path, expected, ctype", [
    ("/pages/doc.pdf", "Revenue grew by twelve percent.", "application/pdf"),
    ("/pages/sniff-pdf", "Sniffed PDF body", "application/pdf"),
    ("/pages/notes.md", "# Notes\n\n- first point", "text/markdown"),
    ("/pages/data.json", '"answer": 42', "application/json"),
])
async def test_pdf_and_text_formats(web, open_settings, path, expected, ctype):
    page = await read_page(web.url + path, settings=open_settings)
    assert expected in page.text and page.content_type == ctype


@pytest.mark.parametrize("path, what", [("/pages/image.png", "image/png"), ("/pages/archive.zip", "application/zip"),
                                        ("/pages/blob", "application/octet-stream")])
async def test_binary_content_is_refused(web, open_settings, path, what):
    with pytest.raises(ParseError, match=f"it is {what}; only HTML, PDF and text"):
        await read_page(web.url + path, settings=open_settings)


async def test_oversized_body_is_cut_and_marked(web, open_settings):
    s = open_settings.model_copy(update={"max_page_bytes": 100_000})
    first = await read_page(f"{web.url}/pages/big.txt?bytes=3000000", max_chars=50_000, settings=s)
    assert first.total_chars == 100_000 and first.truncated
    last = await read_page(f"{web.url}/pages/big.txt?bytes=3000000", max_chars=50_000,
                           start_char=first.total_chars - 10, settings=s)
    assert last.truncated  # the window reaches the end, but the page itself went on


async def test_oversized_pdf_is_refused_before_download(web, open_settings):
    s = open_settings.model_copy(update={"max_page_bytes": 10_000})
    with pytest.raises(ParseError, match="the PDF is larger than 10000 bytes"):
        await read_page(f"{web.url}/pages/big.pdf", settings=s)
    assert "Big" in (await read_page(f"{web.url}/pages/big.pdf", settings=open_settings)).text


async def test_windowing_reads_a_long_page_in_parts(web, open_settings):
    url = f"{web.url}/pages/long.html"
    whole = await read_page(url, max_chars=200_000, settings=open_settings)
    assert whole.total_chars > 10_000 and not whole.truncated
    parts, start = [], 0
    while True:
        page = await read_page(url, max_chars=3000, start_char=start, settings=open_settings)
        assert page.start_char == start and page.total_chars == whole.total_chars
        assert len(page.text) <= 3000
        parts.append(page.text)
        start += len(page.text)
        if not page.truncated:
            break
        assert not page.text.endswith(("Paragrap", "harbou"))  # windows end between words
    assert "".join(parts) == whole.text
    past = await read_page(url, start_char=whole.total_chars + 5, settings=open_settings)
    assert past.text == "" and not past.truncated


async def test_fallback_when_main_text_extraction_finds_nothing(web, open_settings):
    page = await read_page(f"{web.url}/pages/empty.html", settings=open_settings)
    assert page.text == "Just a line." and page.title == "Tiny"


async def test_redirects_are_followed_up_to_the_limit(web, open_settings):
    page = await read_page(f"{web.url}/chain/5", settings=open_settings)
    assert page.final_url == f"{web.url}/pages/article.html"
    with pytest.raises(ProviderError, match="redirected more than 5 times"):
        await read_page(f"{web.url}/chain/6", settings=open_settings)


async def test_http_errors_and_timeouts(web, open_settings):
    with pytest.raises(ProviderError, match=r"was not found \(HTTP 404\)"):
        await read_page(f"{web.url}/pages/not-found", settings=open_settings)
    fast = open_settings.model_copy(update={"total_timeout_s": 0.3})
    with pytest.raises(ProviderTimeout, match="took too long"):
        await read_page(f"{web.url}/pages/slow.html?s=1", settings=fast)


@pytest.mark.parametrize("kwargs, error", [
    ({"url": ""}, InvalidInput), ({"url": "https://example.com", "max_chars": 0}, InvalidInput),
    ({"url": "https://example.com", "start_char": -1}, InvalidInput),
    ({"url": "file:///etc/passwd"}, UnsafeURLError), ({"url": "ftp://example.com/x"}, UnsafeURLError),
    ({"url": "local://corpus/doc.md"}, UnsafeURLError),
])
async def test_bad_arguments(open_settings, kwargs, error):
    with pytest.raises(error):
        await read_page(**kwargs, settings=open_settings)


async def test_cache_hit_makes_no_request(web, tmp_path):
    s = ToolSettings(allow_private_urls=True, cache_enabled=True, data_dir=tmp_path)
    url = f"{web.url}/pages/article.html?cache-test=1"
    first = await read_page(url, settings=s)
    n = web.count("/pages/article.html")
    second = await read_page(url, max_chars=100, settings=s)
    assert web.count("/pages/article.html") == n
    assert second.text == first.text[:len(second.text)] and second.total_chars == first.total_chars


async def test_fifty_concurrent_reads(web, open_settings):
    pages = await asyncio.gather(*(read_page(f"{web.url}/pages/article.html?n={i}", settings=open_settings)
                                   for i in range(50)))
    assert all("sea wall" in p.text for p in pages)


# ---------------------------------------------------------------- safety


@pytest.mark.parametrize("ip", ["127.0.0.1", "127.8.8.8", "10.1.2.3", "172.16.0.1", "192.168.0.10",
                                "169.254.169.254", "169.254.1.1", "100.100.100.200", "100.64.0.1", "0.0.0.0",
                                "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fc00::1",
                                "fd00:ec2::254", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "ff02::1",
                                "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "198.18.0.1"])
def test_unsafe_addresses(ip):
    assert unsafe_reason(ip) is not None


@pytest.mark.parametrize("ip", [PUBLIC_IP, "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses(ip):
    assert unsafe_reason(ip) is None


def test_metadata_addresses_are_named():
    assert unsafe_reason("169.254.169.254") == "a cloud metadata address"
    assert unsafe_reason("fd00:ec2::254") == "a cloud metadata address"


@pytest.mark.parametrize("url, reason", [
    ("http://127.0.0.1:{port}/pages/article.html", "loopback"),
    ("http://localhost:{port}/pages/article.html", "local host name"),
    ("http://[::ffff:127.0.0.1]:{port}/pages/article.html", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://10.0.0.1/", "private"),
])
async def test_private_targets_refused_by_default(web, closed_settings, url, reason):
    before = len(web.requests)
    with pytest.raises(UnsafeURLError, match=reason):
        await read_page(url.format(port=web.port), settings=closed_settings)
    assert len(web.requests) == before  # nothing was sent


async def test_guarded_client_reads_a_public_name(web, closed_settings, guarded):
    net, client = guarded
    page = await read_page(f"http://public.test:{web.port}/pages/article.html?g=1", settings=closed_settings,
                           client=client)
    assert "sea wall" in page.text
    assert net.dialled == [PUBLIC_IP]  # connected to the address that was checked
    assert web.last("/pages/article.html").headers["host"] == f"public.test:{web.port}"


@pytest.mark.parametrize("target, reason", [
    ("http://127.0.0.1:{port}/pages/article.html", "loopback"),
    ("http://10.0.0.7/admin", "private"),
    ("http://169.254.169.254/latest/meta-data/iam/", "cloud metadata"),
    ("http://private.test:{port}/pages/article.html", "resolving to 10.0.0.5"),
    ("http://meta.test/latest/meta-data/", "resolving to 169.254.169.254"),
    ("http://rebind.test:{port}/pages/article.html", "resolving to 192.168.1.1"),
    ("http://mapped.test:{port}/pages/article.html", "resolving to ::ffff:127.0.0.1"),
    ("http://localhost:{port}/pages/article.html", "local host name"),
    ("file:///etc/passwd", "only http and https"),
])
async def test_redirects_to_private_targets_are_refused(web, closed_settings, guarded, target, reason):
    net, client = guarded
    target = target.format(port=web.port)
    before = web.count("/pages/article.html")
    with pytest.raises(UnsafeURLError, match=reason):
        await read_page(f"http://public.test:{web.port}/redirect?to={target}", settings=closed_settings,
                        client=client)
    assert web.count("/pages/article.html") == before
    assert set(net.dialled) == {PUBLIC_IP}


async def test_a_name_resolving_privately_is_refused_before_connecting(closed_settings, guarded):
    net, client = guarded
    with pytest.raises(UnsafeURLError, match="10.0.0.5, a private address"):
        await read_page("http://private.test/x", settings=closed_settings, client=client)
    assert net.dialled == []


# ---------------------------------------------------------------- TLS with a pinned address


def _self_signed(hostname):
    crypto = pytest.importorskip("cryptography")
    del crypto
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


@pytest.fixture(scope="module")
def tls_web(tmp_path_factory):
    cert_pem, key_pem = _self_signed("public.test")
    d = tmp_path_factory.mktemp("tls")
    (d / "cert.pem").write_bytes(cert_pem)
    (d / "key.pem").write_bytes(key_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(d / "cert.pem", d / "key.pem")
    web = FakeWeb().start(ssl_context=server_ctx)
    yield web, cert_pem
    web.stop()


async def test_https_verifies_the_certificate_for_the_host_name(tls_web, closed_settings):
    web, cert_pem = tls_web
    net = Network()
    trust = ssl.create_default_context(cadata=cert_pem.decode())
    client = make_reader_client(closed_settings, resolve=net.resolve, route=net.route, ssl_context=trust)
    try:
        page = await read_page(f"https://public.test:{web.port}/pages/article.html", settings=closed_settings,
                               client=client)
        assert "sea wall" in page.text and net.dialled == [PUBLIC_IP]
        # Same server, same pinned address, but a name the certificate does not cover: refused.
        FAKE_DNS["other.test"] = [PUBLIC_IP]
        with pytest.raises(ProviderError, match="CERTIFICATE_VERIFY_FAILED|certificate|ConnectError"):
            await read_page(f"https://other.test:{web.port}/pages/article.html", settings=closed_settings,
                            client=client)
    finally:
        FAKE_DNS.pop("other.test", None)
        await client.aclose()


def test_extract_is_a_plain_function():
    html = "<html><head><title>T</title></head><body><article><p>" + "Word " * 80 + "</p></article></body></html>"
    title, date, text = extract(html, "https://example.com/a")
    assert title == "T" and date is None and text.startswith("Word Word")


def test_public_ip_constant_is_global():
    assert ipaddress.ip_address(PUBLIC_IP).is_global


async def test_render_js_without_playwright_says_how_to_install(web, open_settings):
    if importlib.util.find_spec("playwright") is not None:
        pytest.skip("Playwright is installed here")
    s = open_settings.model_copy(update={"render_js": True})
    with pytest.raises(ProviderError, match="Playwright is not installed"):
        await read_page(f"{web.url}/pages/article.html", settings=s)


# ---------------------------------------------------------------- ranking a page's passages


def test_page_passage_scores_match_the_bm25s_index():
    """rank_passages scores a page in plain Python; it must rank exactly as the bm25s index does."""
    from tools.passages import BM25Index, rank_passages, small_bm25_scores, split_passages

    text = "\n\n".join(
        f"Paragraph {k} on sea walls. Concrete profiles and {'tidal monitoring ' * (k % 3)}stations "
        f"report {k * 7}% less erosion in the harbour." for k in range(1, 13))
    passages = split_passages(text, target_chars=200)
    assert len(passages) > 4
    for query in ("tidal monitoring monitoring", "sea walls erosion", "concrete", "the of and", "unrelated words"):
        ours = small_bm25_scores(query, passages)
        theirs = BM25Index(passages).scores(query)
        assert ours == pytest.approx(theirs, abs=1e-5)
    best = rank_passages("tidal monitoring", passages, 3)
    assert [i for i, _ in best] == [i for i, _ in BM25Index(passages).top("tidal monitoring", 3)]
    assert rank_passages("unrelated words", passages, 2) == [(0, 0.0), (1, 0.0)]  # the opening passages


async def test_pool_liveness_probe_sees_a_connection_the_server_closed():
    """ProbedStream answers httpcore's "is_readable" probe from the socket: False while a kept-alive
    connection is idle and open, True once the server has closed it (so the pool drops it)."""
    from tools.reader import GuardedBackend

    closed = asyncio.Event()
    writers = []

    async def serve(reader, writer):
        writers.append(writer)
        await closed.wait()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stream = await GuardedBackend(allow_private=True).connect_tcp("127.0.0.1", port, timeout=5)
    try:
        assert stream.get_extra_info("is_readable") is False
        assert stream.get_extra_info("server_addr")[1] == port  # other lookups still reach anyio
        closed.set()
        for _ in range(100):
            if stream.get_extra_info("is_readable"):
                break
            await asyncio.sleep(0.01)
        assert stream.get_extra_info("is_readable") is True
    finally:
        await stream.aclose()
        server.close()
        await server.wait_closed()


# ---------------------------------------------------------------- extraction in worker processes


async def test_extraction_in_a_worker_process_reads_the_same_page(web, open_settings):
    in_thread = await read_page(f"{web.url}/pages/article.html", settings=open_settings)
    in_process = await read_page(f"{web.url}/pages/article.html",
                                 settings=open_settings.model_copy(update={"extract_processes": 1}))
    assert (in_process.title, in_process.published_date, in_process.text) == \
           (in_thread.title, in_thread.published_date, in_thread.text)


def test_extraction_workers_exit_when_their_server_is_killed(tmp_path):
    """A killed server cannot stop its pool; the workers notice and exit on their own."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from benchmarks.common import process_alive

    script = ("import os, sys, time; from tools.reader import warm_extract_pool, _pool; "
              "from tools.settings import ToolSettings; "
              "warm_extract_pool(ToolSettings(extract_processes=2)); "
              "import tools.reader as r; print(' '.join(str(p) for p in r._pool._processes), flush=True); "
              "time.sleep(60)")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and all(process_alive(p) for p in pids)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids if process_alive(p)], "orphaned extraction workers"
    finally:
        if proc.poll() is None:
            proc.kill()
