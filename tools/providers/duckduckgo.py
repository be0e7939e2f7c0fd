"""DuckDuckGo through `ddgs`: the keyless default.

ddgs is synchronous, so it runs in a worker thread; it raises on "no results", which here is an
empty answer, and its rate-limit and timeout exceptions map to our taxonomy.
"""

from __future__ import annotations

import asyncio

from tools.base import ProviderError, ProviderTimeout, RateLimitError, SearchHit, SearchMetadata, SearchRequest, \
    SearchResponse
from tools.providers._base import WebSearchProvider, site_filters

_TIMELIMIT = {"day": "d", "week": "w", "month": "m", "year": "y"}


class DuckDuckGoProvider(WebSearchProvider):
    name = "duckduckgo"

    def _text(self, req: SearchRequest) -> list[dict]:
        from ddgs import DDGS

        query = " ".join(p for p in (req.query, site_filters(req)) if p)
        return DDGS(timeout=int(max(1, self.settings.read_timeout_s))).text(
            query, region=req.region or "us-en", safesearch=self.settings.duckduckgo_safesearch,
            timelimit=_TIMELIMIT.get(req.freshness or ""), max_results=req.max_results, page=req.page)

    async def _search(self, req: SearchRequest) -> SearchResponse:
        from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

        try:
            rows = await asyncio.to_thread(self._text, req)
        except RatelimitException:
            raise RateLimitError("duckduckgo is rate limiting us: wait a minute, or add another provider "
                                 "(SEARXNG_URL, TAVILY_API_KEY, BRAVE_API_KEY ...)", provider=self.name) from None
        except TimeoutException:
            raise ProviderTimeout("duckduckgo did not answer in time; try again", provider=self.name) from None
        except DDGSException as e:
            if "no results" not in str(e).lower():
                raise ProviderError(f"duckduckgo failed: {e}", provider=self.name) from None
            rows = []  # ddgs raises instead of returning an empty list
        hits = [SearchHit(title=r.get("title") or "", url=r.get("href") or r.get("url") or "",
                          content=r.get("body") or "") for r in rows]
        return SearchResponse(results=hits, metadata=SearchMetadata(query=req.query, provider=self.name))
