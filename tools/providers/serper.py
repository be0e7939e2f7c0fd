"""Serper, Google results (https://serper.dev): POST /search with X-API-KEY."""

from __future__ import annotations

from pydantic import BaseModel

from tools.base import SearchHit, SearchMetadata, SearchRequest, SearchResponse
from tools.providers._base import KeyedApiProvider, iso_date, parse, region_parts, site_filters

_TBS = {"day": "qdr:d", "week": "qdr:w", "month": "qdr:m", "year": "qdr:y"}


class _Organic(BaseModel):
    link: str
    title: str = ""
    snippet: str = ""
    date: str | None = None
    position: int | None = None


class _Answer(BaseModel):
    organic: list[_Organic] = []


class SerperProvider(KeyedApiProvider):
    name = "serper"
    key_env = "SERPER_API_KEY"

    async def _search(self, req: SearchRequest) -> SearchResponse:
        q = " ".join(p for p in (req.query, site_filters(req)) if p)
        body: dict = {"q": q, "num": req.max_results, "page": req.page}
        if req.freshness:
            body["tbs"] = _TBS[req.freshness]
        country, language = region_parts(req.region)
        if country:
            body["gl"] = country
        if language:
            body["hl"] = language
        data = await self.api.request_json("POST", "/search", json_body=body, headers={"X-API-KEY": self._key})
        answer = parse(_Answer, data, self.name)
        hits = [SearchHit(title=o.title, url=o.link, content=o.snippet, published_date=iso_date(o.date),
                          score=round(1.0 / o.position, 4) if o.position else None) for o in answer.organic]
        return SearchResponse(results=hits, metadata=SearchMetadata(query=req.query, provider=self.name))
