"""Tavily search (https://docs.tavily.com): POST /search with a Bearer key."""

from __future__ import annotations

from pydantic import BaseModel

from tools.base import SearchHit, SearchMetadata, SearchRequest, SearchResponse
from tools.providers._base import KeyedApiProvider, iso_date, parse

MAX_RESULTS = 20  # Tavily's ceiling per request; it has no paging, so page N asks for N*max_results


class _Result(BaseModel):
    url: str
    title: str = ""
    content: str = ""
    score: float | None = None
    published_date: str | None = None
    raw_content: str | None = None


class _Answer(BaseModel):
    results: list[_Result] = []


class TavilyProvider(KeyedApiProvider):
    name = "tavily"
    key_env = "TAVILY_API_KEY"

    async def _search(self, req: SearchRequest) -> SearchResponse:
        skip = (req.page - 1) * req.max_results
        body: dict = {"query": req.query, "max_results": min(MAX_RESULTS, skip + req.max_results),
                      "search_depth": "basic", "topic": "general", "include_answer": False,
                      "include_raw_content": False}
        if req.freshness:
            body["time_range"] = req.freshness
        if req.include_domains:
            body["include_domains"] = req.include_domains
        if req.exclude_domains:
            body["exclude_domains"] = req.exclude_domains
        data = await self.api.request_json("POST", "/search", json_body=body,
                                           headers={"Authorization": f"Bearer {self._key}"})
        answer = parse(_Answer, data, self.name)
        hits = [SearchHit(title=r.title, url=r.url, content=r.content, score=r.score,
                          published_date=iso_date(r.published_date), raw_content=r.raw_content)
                for r in answer.results[skip:]]
        return SearchResponse(results=hits, metadata=SearchMetadata(query=req.query, provider=self.name))
