"""The server as clients run it: a stdio subprocess and a Streamable HTTP subprocess, fully offline
(a local OpenAI-compatible server on 127.0.0.1 and the shipped corpus through the local provider)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from benchmarks.common import descendants, process_alive
from tests.fakes.openai_server import FakeOpenAI
from tests.mcp_helpers import QUESTION, ROOT, http_server, server_env

pytestmark = pytest.mark.slow
TOKEN = "test-token-5f1d2c9a"


@pytest.fixture(scope="module")
def llm():
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("server-data")


def stdio_params(env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(ROOT / "server.py")], env=env, cwd=str(ROOT))


@contextlib.asynccontextmanager
async def http_client(url: str, token: str | None = TOKEN, mode: str = "auto"):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=120)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as c:
            yield c


async def test_stdio_end_to_end_and_resources_after_restart(llm, data_dir):
    env = server_env(llm.base_url, data_dir)
    messages: list[str] = []

    async def on_progress(progress, total, message):
        messages.append(message)

    async with Client(stdio_params(env)) as c:
        tools = (await c.list_tools()).tools
        assert {t.name for t in tools} >= {"deep_research", "web_search", "read_page", "research_status"}
        r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick"},
                              progress_callback=on_progress)
        out = r.structured_content
        assert out["status"] == "complete" and "[1]" in out["report"], r.content[0].text
        assert messages[0] == "Starting" and messages[-1].startswith("Report ready")
        search = await c.call_tool("web_search", {"query": "heat pump cold climate", "max_results": 2})
        assert [h["engine"] for h in search.structured_content["results"]] == ["local", "local"]
    assert "Plan" in {c["schema"] for c in llm.calls} and len(llm.calls) >= 2  # the model was reached over HTTP
    # a new process reads the same research back from the SQLite files
    async with Client(stdio_params(env), mode="legacy") as c:
        uris = {str(x.uri) for x in (await c.list_resources()).resources}
        assert f"research://{out['research_id']}" in uris
        text = (await c.read_resource(f"research://{out['research_id']}/report")).contents[0].text
    assert text == out["report"]


@pytest.fixture(scope="module")
def http_log(tmp_path_factory):
    return tmp_path_factory.mktemp("logs") / "http.log"


@pytest.fixture(scope="module")
def http_url(llm, data_dir, http_log):
    env = server_env(llm.base_url, data_dir, DEEP_RESEARCH_MCP_TOKEN=TOKEN)
    with http_server(env, log=http_log) as (_, base):
        yield base + "/mcp"
    assert TOKEN not in http_log.read_text()  # the token is never logged


def test_http_server_runs_on_uvloop_by_default(http_url, http_log):
    assert "(event loop: uvloop)" in http_log.read_text(), http_log.read_text()[-2000:]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_start_now_collect_later(http_url, mode):
    async with http_client(http_url, mode=mode) as c:
        assert len((await c.list_tools()).tools) == 6
        r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick", "wait": False})
        rid = r.structured_content["research_id"]
        assert r.structured_content["status"] in ("queued", "running")
    # a new connection (the first one dropped) collects the result
    async with http_client(http_url, mode=mode) as c:
        r = await c.call_tool("research_status", {"research_id": rid, "wait_s": 30})
    assert r.structured_content["status"] == "complete" and r.structured_content["report"]


async def test_http_refuses_missing_or_wrong_token_and_bad_origin(http_url):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    base_headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(http_url, json=body, headers=base_headers)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        r = await http.post(http_url, json=body, headers={**base_headers, "authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = await http.post(http_url, json=body, headers={**base_headers, "authorization": f"Bearer {TOKEN}",
                                                          "origin": "https://evil.example"})
        assert r.status_code == 403
        r = await http.post(http_url, json=body, headers={**base_headers, "authorization": f"Bearer {TOKEN}",
                                                          "host": "evil.example"})
        assert r.status_code == 421  # the SDK's Host check (DNS rebinding)
        health = await http.get(http_url.removesuffix("/mcp") + "/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
    with pytest.raises(Exception):
        async with http_client(http_url, token=None) as c:
            await c.list_tools()


def test_refuses_a_public_address_without_a_token(llm, tmp_path):
    env = server_env(llm.base_url, tmp_path)
    p = subprocess.run([sys.executable, str(ROOT / "server.py"), "--transport", "http", "--host", "0.0.0.0"],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "DEEP_RESEARCH_MCP_TOKEN" in p.stderr


async def test_stateless_http(llm, tmp_path):
    env = server_env(llm.base_url, tmp_path)
    with http_server(env, "--stateless") as (_, base):
        async with http_client(base + "/mcp", token=None) as c:
            r = await c.call_tool("web_search", {"query": "heat pump installation", "max_results": 3})
    assert not r.is_error and len(r.structured_content["results"]) == 3


async def test_sigterm_interrupts_then_restart_resumes(tmp_path):
    slow = FakeOpenAI(latency_s=0.4).start()
    try:
        env = server_env(slow.base_url, tmp_path)
        log = tmp_path / "server.log"
        with http_server(env, log=log) as (proc, base):
            async with http_client(base + "/mcp", token=None) as c:
                rid = (await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick",
                                                           "wait": False})).structured_content["research_id"]
                for _ in range(300):  # until the model has been asked something: money was spent
                    if slow.calls:
                        break
                    await asyncio.sleep(0.05)
                assert slow.calls
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=15)
            stopped_in = time.monotonic() - t0
        assert code == 0 and stopped_in < 10, log.read_text()[-2000:]
        # the graceful path ran: the server stopped the research itself (interrupted, resumable)
        assert "stopping 1 running research(es)" in log.read_text(), log.read_text()[-2000:]
        # the HTTP transport resumes interrupted researches at startup by default
        with http_server(env, log=log) as (_, base):
            async with http_client(base + "/mcp", token=None) as c:
                r = await c.call_tool("research_status", {"research_id": rid, "wait_s": 45})
        assert r.structured_content["status"] == "complete", r.structured_content
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]  # both stops were clean
    finally:
        slow.stop()


async def test_stdio_server_exits_promptly_on_sigterm(llm, tmp_path):
    env = server_env(llm.base_url, tmp_path)
    proc = subprocess.Popen([sys.executable, str(ROOT / "server.py")], env=env, cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # answer one request first, so the server is really up
        proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
                         b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n')
        proc.stdin.flush()
        assert b'"id":1' in proc.stdout.readline()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # stdin stays open: the server must not wait for it
        assert proc.wait(timeout=10) == 0 and time.monotonic() - t0 < 10
        assert b"stopping" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_workers_need_http_and_stateless(llm, tmp_path):
    env = server_env(llm.base_url, tmp_path)
    for args, words in ((["--transport", "http", "--workers", "2"], "--stateless"),
                        (["--workers", "2"], "--transport http"),
                        (["--transport", "http", "--stateless", "--workers", "0"], "1 or more")):
        p = subprocess.run([sys.executable, str(ROOT / "server.py"), *args], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and words in p.stderr, (args, p.stderr)


async def test_two_workers_share_the_port_the_records_and_stop_together(llm, tmp_path):
    env = server_env(llm.base_url, tmp_path, DEEP_RESEARCH_EXTRACT_PROCESSES="1")
    log = tmp_path / "workers.log"
    with http_server(env, "--stateless", "--workers", "2", log=log) as (proc, base):
        for _ in range(100):  # both workers up (each has its extraction process beside it)
            workers = [p for p in descendants(proc.pid) if b"--reuse-port" in open(f"/proc/{p}/cmdline", "rb").read()]
            if len(workers) == 2 and log.read_text().count("serving MCP on") >= 3:
                break
            time.sleep(0.1)
        assert len(workers) == 2, log.read_text()[-2000:]
        async with http_client(base + "/mcp", token=None) as c:
            r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick"})
        out = r.structured_content
        assert out["status"] == "complete" and out["stats"]["framework_ms"] >= 0, out
        # whichever worker a new connection reaches reads the same record
        for _ in range(6):
            async with http_client(base + "/mcp", token=None) as c:
                s = await c.call_tool("research_status", {"research_id": out["research_id"]})
            assert s.structured_content["status"] == "complete", s.structured_content
        tree = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, log.read_text()[-2000:]
    deadline = time.monotonic() + 10
    while any(process_alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if process_alive(p)], "workers or extraction processes outlived the server"


def test_an_unusable_data_dir_is_named_and_workers_that_cannot_start_stop_the_supervisor(llm, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    env = server_env(llm.base_url, not_a_dir)
    base = [sys.executable, str(ROOT / "server.py"), "--transport", "http", "--port", "0"]
    alone = subprocess.run(base, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert alone.returncode == 2 and "DEEP_RESEARCH_DATA_DIR" in alone.stderr, alone.stderr[-1000:]
    t0 = time.monotonic()
    sup = subprocess.run([*base, "--stateless", "--workers", "2"], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=90)
    assert sup.returncode == 1 and "keep exiting" in sup.stderr, sup.stderr[-2000:]
    assert sup.stderr.count("DEEP_RESEARCH_DATA_DIR") >= 2 and time.monotonic() - t0 < 60
