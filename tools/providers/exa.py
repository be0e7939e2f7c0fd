"""Exa neural search (https://docs.exa.ai): POST /search with x-api-key, highlights as snippets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from tools.base import SearchHit, SearchMetadata, SearchRequest, SearchResponse
from tools.providers._base import KeyedApiProvider, iso_date, parse

_DAYS = {"day": 1, "week": 7, "month": 31, "year": 366}
MAX_RESULTS = 100


class _Result(BaseModel):
    url: str
    title: str | None = None
    publishedDate: str | None = None
    score: float | None = None
    highlights: list[str] = []
    summary: str | None = None
    text: str | None = None


class _Answer(BaseModel):
    results: list[_Result] = []


class ExaProvider(KeyedApiProvider):
    name = "exa"
    key_env = "EXA_API_KEY"

    async def _search(self, req: SearchRequest) -> SearchResponse:
        skip = (req.page - 1) * req.max_results
        body: dict = {"query": req.query, "numResults": min(MAX_RESULTS, skip + req.max_results), "type": "auto",
                      "contents": {"highlights": {"numSentences": 3, "highlightsPerUrl": 2}}}
        if req.freshness:
            since = datetime.now(UTC) - timedelta(days=_DAYS[req.freshness])
            body["startPublishedDate"] = since.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        if req.include_domains:
            body["includeDomains"] = req.include_domains
        if req.exclude_domains:
            body["excludeDomains"] = req.exclude_domains
        data = await self.api.request_json("POST", "/search", json_body=body, headers={"x-api-key": self._key})
        answer = parse(_Answer, data, self.name)
        hits = [SearchHit(title=r.title or "", url=r.url, score=r.score, published_date=iso_date(r.publishedDate),
                          content=" … ".join(r.highlights) or r.summary or (r.text or "")[:500])
                for r in answer.results[skip:]]
        return SearchResponse(results=hits, metadata=SearchMetadata(query=req.query, provider=self.name))
