"""ChatOpenAI over real HTTP to a local OpenAI-compatible server (openai 3.x uses httpx2, so
nothing short of a real server sees its traffic)."""

from __future__ import annotations

import io
import json
import socket

import pytest

from graph.llm import LLMError
from graph.runner import run_research
from graph.settings import make_settings
from graph.testing import sample_corpus_dir
from tests.fakes.openai_server import FakeOpenAI, _Handler
from tools.providers.local import LocalProvider


class RejectsJsonSchema(_Handler):
    """Like a local server that does not implement response_format=json_schema."""

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if (json.loads(raw or b"{}").get("response_format") or {}).get("type") == "json_schema":
            return self._json(400, {"error": {"message": "response_format 'json_schema' is not supported",
                                              "type": "invalid_request_error"}})
        self.rfile = io.BytesIO(raw)
        super().do_POST()


class Unauthorized(_Handler):
    def do_POST(self) -> None:
        self._json(401, {"error": {"message": "Incorrect API key provided: sk-secret123", "type": "invalid_request_error",
                                   "code": "invalid_api_key"}})


@pytest.fixture
def server(request):
    handler = getattr(request, "param", None)
    srv = FakeOpenAI()
    if handler:
        srv.RequestHandlerClass = handler
    srv.start()
    yield srv
    srv.stop()


def http_settings(base_url: str, **overrides):
    overrides.setdefault("depth", "quick")
    s = make_settings(base_url=base_url, model="fake-model", providers=["local"],
                      corpus=str(sample_corpus_dir()), llm_max_retries=0, **overrides)
    return s.with_search_providers([LocalProvider.from_folder(sample_corpus_dir())])


async def test_a_research_over_http_with_json_schema(server, monkeypatch, question):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    result = await run_research(question, http_settings(server.base_url, depth="standard"))
    assert result.status == "complete" and result.stop_reason == "sufficient" and "[1]" in result.report
    kinds = [c["kind"] for c in server.calls]
    assert kinds.count("json_schema") == 5 and kinds.count("text") == 1  # plan, 3 extracts, reflect; write
    # usage comes from the server's usage block, not an estimate
    assert result.stats.llm_calls == 6 and result.stats.prompt_tokens > 100


@pytest.mark.parametrize("server", [RejectsJsonSchema], indirect=True)
async def test_a_server_without_json_schema_falls_back_to_function_calling(server, question):
    result = await run_research(question, http_settings(server.base_url, depth="standard"))
    assert result.status == "complete" and "[1]" in result.report
    assert [c["kind"] for c in server.calls].count("tools") == 5


@pytest.mark.parametrize("server", [Unauthorized], indirect=True)
async def test_a_refused_key_is_one_clear_error_without_the_secret(server, monkeypatch, question):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret123")
    with pytest.raises(LLMError) as e:
        await run_research(question, http_settings(server.base_url))
    assert "OPENAI_API_KEY" in str(e.value) and "sk-secret123" not in str(e.value)


async def test_an_unreachable_endpoint_names_the_setting(question):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(LLMError, match="OPENAI_BASE_URL"):
        await run_research(question, http_settings(f"http://127.0.0.1:{port}/v1"))
