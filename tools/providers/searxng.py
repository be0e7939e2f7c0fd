"""SearXNG, a self-hosted metasearch engine: GET {SEARXNG_URL}/search?format=json.

Instances ship with only the HTML format enabled and answer format=json with 403; the error says
how to switch JSON on.
"""

from __future__ import annotations

import httpx
from pydantic import BaseModel

from tools.base import AuthError, ProviderError, SearchHit, SearchMetadata, SearchRequest, SearchResponse, ToolError
from tools.http import ApiClient
from tools.providers._base import WebSearchProvider, iso_date, parse, region_parts, site_filters
from tools.settings import ToolSettings


class _Result(BaseModel):
    url: str
    title: str = ""
    content: str | None = ""
    score: float | None = None
    category: str | None = None
    publishedDate: str | None = None


class _Answer(BaseModel):
    results: list[_Result] = []
    number_of_results: float | None = None


def _explain(resp: httpx.Response) -> ToolError | None:
    if resp.status_code == 403:
        return ProviderError(
            f"SearXNG at {resp.request.url.scheme}://{resp.request.url.netloc.decode()} refused format=json "
            "(HTTP 403): add `json` to `search.formats` in its settings.yml (formats: [html, json]) and "
            "restart it", provider="searxng")
    if resp.status_code == 429:
        return ProviderError("SearXNG's bot limiter refused us (HTTP 429): set `server.limiter: false` in its "
                             "settings.yml for a private instance", provider="searxng")
    return None


class SearxngProvider(WebSearchProvider):
    name = "searxng"

    def __init__(self, settings: ToolSettings | None = None):
        super().__init__(settings)
        base = (self.settings.searxng_url or "").strip()
        if not base:
            raise AuthError("searxng needs the address of an instance: set SEARXNG_URL "
                            "(e.g. http://localhost:8080)", provider=self.name)
        self.api = ApiClient(self.name, base, self.settings, key_env="SEARXNG_URL", error_hook=_explain)

    def cache_identity(self) -> dict:
        return {"base": self.api.base_url}

    async def _search(self, req: SearchRequest) -> SearchResponse:
        q = " ".join(p for p in (req.query, site_filters(req)) if p)
        params: dict = {"q": q, "format": "json", "pageno": req.page, "safesearch": 1}
        if req.freshness:
            params["time_range"] = req.freshness
        country, language = region_parts(req.region)
        if language or country:
            params["language"] = f"{language}-{country.upper()}" if language and country else (language or country)
        data = await self.api.request_json("GET", "/search", params=params)
        answer = parse(_Answer, data, self.name)
        hits = [SearchHit(title=r.title, url=r.url, content=r.content or "", score=r.score,
                          category=r.category or "general", published_date=iso_date(r.publishedDate))
                for r in answer.results]
        total = int(answer.number_of_results) if answer.number_of_results else None
        return SearchResponse(results=hits, metadata=SearchMetadata(query=req.query, provider=self.name,
                                                                    total_results=total))
