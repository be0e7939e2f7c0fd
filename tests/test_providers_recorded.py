"""Contract tests on real recorded API answers (Brave, Serper, Tavily), served by the local fake.

The recordings live outside the project (../shared/evaldata/search_api_fixtures, or the folder in
DEEP_RESEARCH_EVALDATA); without them these tests skip.
"""

import html
import json
import os
from pathlib import Path

import pytest

from tests.fakes.search_apis import API_KEY, Reply, shared_fake_web
from tools.providers import build_provider
from tools.settings import ToolSettings
from tools.urls import canonical_url


def _evaldata() -> Path:
    env = os.environ.get("DEEP_RESEARCH_EVALDATA")
    return Path(env) if env else Path(__file__).resolve().parents[1] / ".." / "shared" / "evaldata"


FIXTURES = _evaldata() / "search_api_fixtures"
pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"recorded API answers not found at {FIXTURES}")


def recorded(rel: str) -> dict:
    return json.loads((FIXTURES / rel).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def web():
    return shared_fake_web()


@pytest.fixture
def settings(web, tmp_path):
    return ToolSettings(**web.base_urls(), tavily_api_key=API_KEY, serper_api_key=API_KEY, brave_api_key=API_KEY,
                        cache_enabled=False, data_dir=tmp_path)


async def test_brave_web_recording(web, settings):
    data = recorded("brave_search_python_client/web.json")
    web.script("/brave/res/v1/web/search", Reply(200, data))
    resp = await build_provider("brave", settings=settings).search("hello world", max_results=20)
    raw = data["web"]["results"]
    assert [h.url for h in resp.results] == list(dict.fromkeys(canonical_url(r["url"]) for r in raw))[:20]
    first = resp.results[0]
    assert first.title == html.unescape(raw[0]["title"])
    assert "<strong>" not in first.content and "&quot;" not in first.content and '"Hello, World!"' in first.content
    assert first.published_date == raw[0]["page_age"][:10]


async def test_serper_search_recording(web, settings):
    data = recorded("extracted_from_langchain_docs/tools_google_serper__1.json")
    web.script("/serper/search", Reply(200, data))
    resp = await build_provider("serper", settings=settings).search("Apple Inc.", max_results=10)
    assert [h.url for h in resp.results] == [canonical_url(o["link"]) for o in data["organic"]][:10]
    assert resp.results[0].content == data["organic"][0]["snippet"]
    assert all(h.score and h.score <= 1 for h in resp.results)


async def test_tavily_search_recording(web, settings):
    data = recorded("extracted_from_langchain_docs/tools_tavily_search__1.json")
    web.script("/tavily/search", Reply(200, data))
    resp = await build_provider("tavily", settings=settings).search("Euro 2024 host nation", max_results=10)
    raw = data["results"]
    assert [h.url for h in resp.results] == [canonical_url(r["url"]) for r in raw][:10]
    assert [h.score for h in resp.results] == [r["score"] for r in raw][:10]
    assert "Germany" in resp.results[0].content
