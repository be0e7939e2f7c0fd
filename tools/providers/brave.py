"""Brave Search (https://api-dashboard.search.brave.com): GET /res/v1/web/search, X-Subscription-Token."""

from __future__ import annotations

import httpx
from pydantic import BaseModel

from tools.base import AuthError, SearchHit, SearchMetadata, SearchRequest, SearchResponse, ToolError
from tools.providers._base import KeyedApiProvider, iso_date, parse, region_parts, site_filters
from tools.settings import ToolSettings

_FRESHNESS = {"day": "pd", "week": "pw", "month": "pm", "year": "py"}
MAX_COUNT = 20


class _Result(BaseModel):
    url: str
    title: str = ""
    description: str = ""
    page_age: str | None = None
    extra_snippets: list[str] = []


class _Web(BaseModel):
    results: list[_Result] = []


class _Answer(BaseModel):
    web: _Web = _Web()


def _token_rejected(resp: httpx.Response) -> ToolError | None:
    # Brave answers a bad or missing token with 422 SUBSCRIPTION_TOKEN_INVALID, not 401.
    if resp.status_code == 422 and "SUBSCRIPTION_TOKEN_INVALID" in resp.text:
        return AuthError("brave refused the subscription token (HTTP 422); check BRAVE_API_KEY", provider="brave")
    return None


class BraveProvider(KeyedApiProvider):
    name = "brave"
    key_env = "BRAVE_API_KEY"

    def __init__(self, settings: ToolSettings | None = None):
        super().__init__(settings, error_hook=_token_rejected)

    async def _search(self, req: SearchRequest) -> SearchResponse:
        q = " ".join(p for p in (req.query, site_filters(req)) if p)
        params: dict = {"q": q, "count": min(MAX_COUNT, req.max_results), "offset": req.page - 1,
                        "text_decorations": "false"}
        if req.freshness:
            params["freshness"] = _FRESHNESS[req.freshness]
        country, language = region_parts(req.region)
        if country:
            params["country"] = country.upper()
        if language:
            params["search_lang"] = language
        data = await self.api.request_json("GET", "/res/v1/web/search", params=params,
                                           headers={"X-Subscription-Token": self._key})
        answer = parse(_Answer, data, self.name)
        hits = [SearchHit(title=r.title, url=r.url, content=" ".join([r.description, *r.extra_snippets[:2]]),
                          published_date=iso_date(r.page_age)) for r in answer.web.results]
        return SearchResponse(results=hits, metadata=SearchMetadata(query=req.query, provider=self.name))
