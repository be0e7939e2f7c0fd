"""DuckDuckGo mapping. ddgs talks to the internet, so DDGS.text is the one thing replaced here."""

import threading

import ddgs.ddgs
import pytest
from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

from tools.base import ProviderError, ProviderTimeout, RateLimitError
from tools.providers import build_provider
from tools.settings import ToolSettings


@pytest.fixture
def settings(tmp_path):
    return ToolSettings(cache_enabled=False, data_dir=tmp_path)


@pytest.fixture
def calls(monkeypatch):
    """Replace DDGS.text with a recorder; tests set `calls.behaviour` to a result list or an exception."""
    class Calls(list):
        behaviour: object = []

    log = Calls()

    def fake_text(self, query, **kwargs):
        log.append({"query": query, "thread": threading.current_thread().name, **kwargs})
        if isinstance(log.behaviour, Exception):
            raise log.behaviour
        return log.behaviour

    # ddgs.DDGS is a lazy proxy; the class that runs is ddgs.ddgs.DDGS.
    monkeypatch.setattr(ddgs.ddgs.DDGS, "text", fake_text)
    return log


async def test_maps_results_and_cleans_urls(settings, calls):
    calls.behaviour = [
        {"title": "Tides &amp; moon", "href": "https://Example.com/tides?utm_source=ddg#x", "body": "The <b>moon</b>."},
        {"title": "Same page again", "href": "https://example.com/tides", "body": "dup"},
        {"title": "Second", "href": "https://other.example.org/b", "body": "B"},
    ]
    resp = await build_provider("duckduckgo", settings=settings).search(
        "why are there tides", max_results=5, freshness="week", region="de-de", page=2)
    assert [h.url for h in resp.results] == ["https://example.com/tides", "https://other.example.org/b"]
    assert resp.results[0].title == "Tides & moon" and resp.results[0].content == "The moon."
    assert all(h.engine == "duckduckgo" for h in resp.results)
    call = calls[0]
    assert call["timelimit"] == "w" and call["region"] == "de-de" and call["page"] == 2 and call["max_results"] == 5
    assert call["thread"] != threading.main_thread().name  # ran off the event loop


async def test_no_results_exception_is_an_empty_answer(settings, calls):
    calls.behaviour = DDGSException("No results found.")
    resp = await build_provider("duckduckgo", settings=settings).search("zzqxj nothing")
    assert resp.results == [] and resp.metadata.provider == "duckduckgo"


@pytest.mark.parametrize("exc, error, text", [
    (RatelimitException("202 Ratelimit"), RateLimitError, "rate limiting"),
    (TimeoutException("timed out"), ProviderTimeout, "did not answer in time"),
    (DDGSException("https://html.duckduckgo.com 403 Forbidden"), ProviderError, "duckduckgo failed"),
])
async def test_errors_map_to_the_taxonomy(settings, calls, exc, error, text):
    calls.behaviour = exc
    with pytest.raises(error, match=text):
        await build_provider("duckduckgo", settings=settings).search("anything")


async def test_domain_filters_become_site_operators_and_are_enforced(settings, calls):
    calls.behaviour = [{"title": "a", "href": "https://docs.python.org/3/", "body": ""},
                       {"title": "b", "href": "https://blog.example.com/python", "body": ""}]
    resp = await build_provider("duckduckgo", settings=settings).search("asyncio", include_domains=["python.org"])
    assert "site:python.org" in calls[0]["query"]
    assert [h.url for h in resp.results] == ["https://docs.python.org/3/"]
