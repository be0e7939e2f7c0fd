"""Reciprocal rank fusion and the several-providers-at-once path (real providers on the fake APIs)."""

import pytest
from pydantic import SecretStr, ValidationError

from tests.fakes.search_apis import API_KEY, Reply, shared_fake_web
from tools.base import (AuthError, InvalidInput, RateLimitError, SearchHit, SearchMetadata, SearchProvider,
                        SearchRequest, SearchResponse)
from tools.providers import build_providers
from tools.search import RRF_K, check_query, fuse, query_for_log, search_all
from tools.settings import ToolSettings


def response(provider, urls, **extra):
    return SearchResponse(results=[SearchHit(url=u, title=f"{provider} {i}", engine=provider, **extra)
                                   for i, u in enumerate(urls)],
                          metadata=SearchMetadata(query="q", provider=provider))


def test_rrf_scores_and_order():
    a = response("a", ["https://x.com/1", "https://x.com/2", "https://x.com/3"])
    b = response("b", ["https://x.com/3", "https://x.com/1"])
    fused = fuse([a, b], "q", 10)
    urls = [h.url for h in fused.results]
    assert urls == ["https://x.com/1", "https://x.com/3", "https://x.com/2"]
    assert fused.results[0].score == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 2), abs=1e-6)
    assert fused.results[0].engine == "a,b" and fused.results[2].engine == "a"
    assert fused.metadata.provider == "a+b" and fused.metadata.total_results == 3


def test_duplicates_merge_by_canonical_url_and_fill_gaps():
    a = SearchResponse(results=[SearchHit(url="http://www.x.com/story/?utm_source=a", title="Story", engine="a")],
                       metadata=SearchMetadata(query="q", provider="a"))
    b = SearchResponse(results=[SearchHit(url="https://x.com/story", title="Story (b)", content="snippet",
                                          published_date="2024-01-01", engine="b")],
                       metadata=SearchMetadata(query="q", provider="b"))
    fused = fuse([a, b], "q", 10)
    assert len(fused.results) == 1
    hit = fused.results[0]
    assert hit.title == "Story" and hit.content == "snippet" and hit.published_date == "2024-01-01"
    assert hit.engine == "a,b"


def test_fuse_truncates_and_keeps_warnings():
    a = response("a", [f"https://x.com/{i}" for i in range(10)])
    a.warnings = ["a: partial"]
    fused = fuse([a], "q", 4)
    assert len(fused.results) == 4 and fused.warnings == ["a: partial"]


def test_query_checks():
    s = ToolSettings(query_deny=["acme", "/\\bssn\\s*\\d{3}/"])
    check_query("acmeology lectures", s)  # keywords match whole words only
    with pytest.raises(InvalidInput, match="'acme'"):
        check_query("ACME internal memo", s)
    with pytest.raises(InvalidInput, match="ssn"):
        check_query("find ssn 123-45", s)
    assert query_for_log("private question").startswith("q#")


@pytest.fixture(scope="module")
def web():
    return shared_fake_web()


@pytest.fixture
def settings(web, tmp_path):
    return ToolSettings(**web.base_urls(), tavily_api_key=API_KEY, brave_api_key=API_KEY, exa_api_key=API_KEY,
                        serper_api_key=API_KEY, cache_enabled=False, data_dir=tmp_path, retry_attempts=0)


async def test_several_providers_fused(web, settings):
    providers = build_providers(["tavily", "brave", "exa"], settings=settings)
    resp = await search_all(providers, SearchRequest(query="fusion of three engines", max_results=6))
    assert len(resp.results) == 6 and not resp.warnings
    assert resp.metadata.provider == "tavily+brave+exa"
    assert any("," in h.engine for h in resp.results)  # pages found by several engines
    assert len({h.url for h in resp.results}) == 6
    assert all("utm_" not in h.url for h in resp.results)


async def test_failing_providers_are_skipped_with_warnings(web, settings):
    s = settings.model_copy(update={"serper_api_key": SecretStr("bad-key-123")})
    web.script("/exa/search", Reply(432, {"error": "plan limit reached"}))
    providers = build_providers(["serper", "tavily", "exa"], settings=s)
    resp = await search_all(providers, SearchRequest(query="skip the broken ones", max_results=5))
    assert resp.results and {h.engine for h in resp.results} == {"tavily"}
    assert any(w.startswith("serper skipped:") and "SERPER_API_KEY" in w for w in resp.warnings)
    assert any(w.startswith("exa skipped:") and "quota" in w for w in resp.warnings)
    assert all("bad-key-123" not in w for w in resp.warnings)


async def test_all_failing_raises_the_most_useful_error(web, settings):
    s = settings.model_copy(update={"tavily_api_key": SecretStr("bad-key-456")})
    web.script("/brave/res/v1/web/search", Reply(429, {"message": "slow"}, headers={"Retry-After": "30"}))
    with pytest.raises(AuthError) as e:
        await search_all(build_providers(["brave", "tavily"], settings=s),
                         SearchRequest(query="everything fails", max_results=3))
    assert "every search provider failed" in e.value.message and "TAVILY_API_KEY" in e.value.message
    assert e.value.retry_after == 30

    web.script("/brave/res/v1/web/search", Reply(429, {"message": "slow"}))
    with pytest.raises(RateLimitError):  # a single provider's own error, unchanged
        await search_all(build_providers(["brave"], settings=settings), SearchRequest(query="alone", max_results=3))


async def test_deny_rules_apply_to_every_provider(settings):
    class Local(SearchProvider):
        name = "local"
        settings = ToolSettings(query_deny=["forbidden"])

        async def _search(self, req):
            raise AssertionError("must not be called")

    with pytest.raises(InvalidInput, match="'forbidden'"):
        await search_all([Local()], SearchRequest(query="a forbidden topic"))


async def test_query_validation():
    with pytest.raises(InvalidInput):
        await search_all([], SearchRequest(query="x"))
    with pytest.raises(ValidationError, match="query is empty"):
        SearchRequest(query="   ")
