"""Every HTTP provider against the local fake APIs: request shape, mapping, clean URLs, errors, cache."""

import itertools

import pytest
from pydantic import SecretStr

from tests.fakes.search_apis import API_KEY, DOCS, Reply, shared_fake_web
from tools.base import AuthError, InvalidInput, ParseError, ProviderError, RateLimitError, SearchResponse
from tools.providers import PROVIDERS, build_provider, build_providers, configured_providers
from tools.settings import ToolSettings

HTTP_PROVIDERS = ["tavily", "serper", "brave", "exa", "searxng", "openai"]
PATHS = {"tavily": "/tavily/search", "serper": "/serper/search", "brave": "/brave/res/v1/web/search",
         "exa": "/exa/search", "searxng": "/searxng/search", "openai": "/openai/v1/responses"}
KEYS = {"tavily_api_key": API_KEY, "serper_api_key": API_KEY, "brave_api_key": API_KEY, "exa_api_key": API_KEY,
        "openai_api_key": API_KEY}
ENV_VARS = ["TAVILY_API_KEY", "SERPER_API_KEY", "BRAVE_API_KEY", "BRAVE_SEARCH_API_KEY", "EXA_API_KEY",
            "OPENAI_API_KEY", "SEARXNG_URL", "DEEP_RESEARCH_SEARXNG_URL", "DEEP_RESEARCH_CORPUS"]
_queries = itertools.count()


@pytest.fixture(scope="module")
def web():
    return shared_fake_web()


@pytest.fixture
def settings(web, tmp_path):
    return ToolSettings(**web.base_urls(), **KEYS, cache_enabled=False, data_dir=tmp_path,
                        retry_attempts=1, retry_base_delay_s=0.01)


def fresh(q="reciprocal rank fusion"):
    """A query no other test used (the breaker and cache are per provider, scripts per path)."""
    return f"{q} {next(_queries)}"


@pytest.mark.parametrize("name", HTTP_PROVIDERS)
async def test_contract(web, settings, name):
    provider = build_provider(name, settings=settings)
    resp = await provider.search(fresh(), max_results=3)
    assert isinstance(resp, SearchResponse) and resp.metadata.provider == name
    assert 1 <= len(resp.results) <= 3
    known = {u for _, u, _, _ in DOCS}
    for hit in resp.results:
        assert hit.url in known  # tracking parameters and fragments stripped, www kept as served
        assert hit.title and hit.engine == name and "<" not in hit.content
    assert resp.metadata.time_taken >= 0


@pytest.mark.parametrize("name", ["tavily", "serper", "brave", "exa", "openai"])
async def test_wrong_key_is_an_auth_error_naming_the_variable(web, settings, name):
    s = settings.model_copy(update={f"{name}_api_key": SecretStr("wrong-key-xyz")})
    with pytest.raises(AuthError) as e:
        await build_provider(name, settings=s).search(fresh())
    assert f"{name.upper()}_API_KEY" in e.value.message and "wrong-key-xyz" not in e.value.message


@pytest.mark.parametrize("name", ["tavily", "serper", "brave", "exa", "searxng"])
async def test_no_results_is_an_empty_answer(web, settings, name):
    resp = await build_provider(name, settings=settings).search(fresh("nothing at all"))
    assert resp.results == []


async def test_request_shapes(web, settings):
    await build_provider("tavily", settings=settings).search(fresh(), max_results=4, freshness="week",
                                                             include_domains=["example.org"])
    body = web.last("/tavily/search").json()
    assert body["max_results"] == 4 and body["time_range"] == "week" and body["include_domains"] == ["example.org"]
    assert web.last("/tavily/search").headers["authorization"] == f"Bearer {API_KEY}"

    await build_provider("serper", settings=settings).search(fresh(), freshness="day", region="de-de", page=2)
    body = web.last("/serper/search").json()
    assert body["tbs"] == "qdr:d" and body["gl"] == "de" and body["hl"] == "de" and body["page"] == 2

    await build_provider("brave", settings=settings).search(fresh(), max_results=5, freshness="month", region="us-en")
    q = web.last("/brave/res/v1/web/search").query
    assert q["count"] == ["5"] and q["freshness"] == ["pm"] and q["country"] == ["US"] and q["offset"] == ["0"]

    await build_provider("exa", settings=settings).search(fresh(), freshness="year", exclude_domains=["spam.com"])
    body = web.last("/exa/search").json()
    assert body["startPublishedDate"].endswith("Z") and body["excludeDomains"] == ["spam.com"]

    await build_provider("searxng", settings=settings).search(fresh(), freshness="day", page=2)
    q = web.last("/searxng/search").query
    assert q["format"] == ["json"] and q["time_range"] == ["day"] and q["pageno"] == ["2"]

    s = settings.model_copy(update={"openai_search_model": "gpt-test-search"})
    await build_provider("openai", settings=s).search(fresh(), region="fr")
    body = web.last("/openai/v1/responses").json()
    assert body["model"] == "gpt-test-search" and body["tools"][0]["type"] == "web_search"
    assert body["tools"][0]["user_location"]["country"] == "FR"


@pytest.mark.parametrize("name", ["tavily", "exa", "serper", "brave"])
async def test_pages_do_not_repeat(web, settings, name):
    provider = build_provider(name, settings=settings)
    q = fresh()
    first = await provider.search(q, max_results=3, page=1)
    second = await provider.search(q, max_results=3, page=2)
    assert {h.url for h in first.results}.isdisjoint({h.url for h in second.results})
    assert len(second.results) == 3


async def test_openai_maps_citations_then_consulted_sources(web, settings):
    resp = await build_provider("openai", settings=settings).search(fresh(), max_results=5)
    cited, consulted = resp.results[:3], resp.results[3:]
    assert all(h.content and "](" not in h.content for h in cited)  # the citing passage, links flattened
    assert all(h.content == "" for h in consulted) and len(consulted) == 2
    assert [h.score for h in resp.results] == sorted((h.score for h in resp.results), reverse=True)


async def test_searxng_without_json_format_says_how_to_enable_it(web, settings):
    s = settings.model_copy(update={"searxng_url": f"{web.url}/searxng-htmlonly"})
    with pytest.raises(ProviderError, match=r"add `json` to `search.formats` in its settings.yml"):
        await build_provider("searxng", settings=s).search(fresh())


@pytest.mark.parametrize("name", ["tavily", "serper", "brave", "exa", "searxng", "openai"])
async def test_unexpected_shape_is_a_parse_error(web, settings, name):
    web.script(PATHS[name], Reply(200, {"results": "oops", "organic": 7, "web": [], "output": None}))
    with pytest.raises(ParseError, match=f"{name} answered in an unexpected shape"):
        await build_provider(name, settings=settings).search(fresh())


async def test_rate_limit_is_retried_then_reported(web, settings):
    web.script(PATHS["serper"], Reply(429, headers={"Retry-After": "0"}), Reply(429, {"message": "Too many"}))
    with pytest.raises(RateLimitError, match="serper is rate limiting us"):
        await build_provider("serper", settings=settings).search(fresh())
    web.script(PATHS["serper"], Reply(503))
    assert (await build_provider("serper", settings=settings).search(fresh())).results


async def test_cache_hit_makes_no_request(web, settings, tmp_path):
    s = settings.model_copy(update={"cache_enabled": True, "data_dir": tmp_path / "cache"})
    q = fresh()
    before = web.count(PATHS["tavily"])
    first = await build_provider("tavily", settings=s).search(q, max_results=3)
    second = await build_provider("tavily", settings=s).search(q, max_results=3)
    assert web.count(PATHS["tavily"]) == before + 1
    assert [h.url for h in second.results] == [h.url for h in first.results]
    await build_provider("tavily", settings=s).search(q, max_results=4)  # other parameters: a miss
    assert web.count(PATHS["tavily"]) == before + 2


async def test_deny_rules_refuse_before_any_request(web, settings):
    s = settings.model_copy(update={"query_deny": ["secret project", "/pass(word)?s?/"]})
    before = len(web.requests)
    with pytest.raises(InvalidInput, match="deny rule 'secret project'"):
        await build_provider("tavily", settings=s).search("details of the Secret Project budget")
    with pytest.raises(InvalidInput, match=r"deny rule '/pass\(word\)\?s\?/'"):
        await build_provider("brave", settings=s).search("leaked passwords list")
    assert len(web.requests) == before
    assert (await build_provider("tavily", settings=s).search(fresh("secret projection methods"))).results


def test_registry_names_and_errors(settings, tmp_path, monkeypatch):
    for var in ENV_VARS:  # a developer's own keys must not change what this test sees
        monkeypatch.delenv(var, raising=False)
    assert set(PROVIDERS) == {"duckduckgo", "searxng", "tavily", "serper", "brave", "exa", "openai", "local"}
    with pytest.raises(InvalidInput, match="choose from duckduckgo, searxng, tavily"):
        build_provider("bing", settings=settings)
    with pytest.raises(AuthError, match="set EXA_API_KEY"):
        build_provider("exa", settings=ToolSettings(data_dir=tmp_path))
    with pytest.raises(AuthError, match="set SEARXNG_URL"):
        build_provider("searxng", settings=ToolSettings(data_dir=tmp_path))
    with pytest.raises(InvalidInput, match="pass --corpus or set DEEP_RESEARCH_CORPUS"):
        build_provider("local", settings=ToolSettings(data_dir=tmp_path))
    names = [p.name for p in build_providers("tavily, brave,tavily", settings=settings)]
    assert names == ["tavily", "brave"]
    assert configured_providers(ToolSettings(data_dir=tmp_path)) == ["duckduckgo"]


def test_local_provider_is_built_lazily(tmp_path, settings):
    (tmp_path / "a.md").write_text("# Tides\n\nThe moon drives the tides of the sea.\n")
    provider = build_provider("local", settings=settings, corpus=str(tmp_path))
    assert provider.name == "local"


def test_brave_key_alias(monkeypatch, tmp_path):
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "from-alias")
    assert ToolSettings(data_dir=tmp_path).brave_api_key.get_secret_value() == "from-alias"


def test_citing_passage_keeps_inline_link_text_and_drops_citation_markers():
    from tools.providers.openai import citing_passage

    text = "Intro.\n\nAccording to [Reuters](https://r.com), rates rose. ([ft.com](https://ft.com/x))\n\nNext."
    start = text.index("([")
    assert citing_passage(text, start, start + 5) == "According to Reuters, rates rose."
