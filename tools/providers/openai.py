"""OpenAI web search through the Responses API's hosted `web_search` tool.

The model searches, then answers with url_citation annotations; each cited URL becomes a hit whose
snippet is the answer passage that cites it (the model's summary of that page), followed by the
sources it consulted but did not cite. Plain HTTP (httpx), so any Responses-compatible endpoint
works through OPENAI_BASE_URL.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from tools.base import SearchHit, SearchMetadata, SearchRequest, SearchResponse
from tools.providers._base import KeyedApiProvider, parse, region_parts
from tools.settings import ToolSettings, get_tool_settings

_CITATION = re.compile(r"\s*\(\[[^\]]*\]\([^)]*\)\)")  # "([site](url))" after a claim: drop it
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")  # an inline [text](url): keep the text
_WINDOW = {"day": "the last 24 hours", "week": "the last week", "month": "the last month", "year": "the last year"}


class _Annotation(BaseModel):
    type: str
    url: str | None = None
    title: str | None = None
    start_index: int = 0
    end_index: int = 0


class _Content(BaseModel):
    type: str
    text: str = ""
    annotations: list[_Annotation] = []


class _Source(BaseModel):
    url: str | None = None


class _Action(BaseModel):
    sources: list[_Source] = []


class _Item(BaseModel):
    type: str
    content: list[_Content] = []
    action: _Action | None = None


class _Answer(BaseModel):
    output: list[_Item]
    status: Literal["completed", "incomplete", "in_progress", "failed", "cancelled", "queued"] | None = None


def citing_passage(text: str, start: int, end: int) -> str:
    """The paragraph of `text` around a citation span, markdown links reduced to their text."""
    lo = text.rfind("\n\n", 0, start)
    hi = text.find("\n\n", end)
    passage = text[lo + 2 if lo >= 0 else 0: hi if hi >= 0 else len(text)]
    return " ".join(_LINK.sub(r"\1", _CITATION.sub("", passage)).split())


def hits_from_output(answer: _Answer) -> list[SearchHit]:
    hits: dict[str, SearchHit] = {}
    for item in answer.output:
        for part in item.content:
            for a in part.annotations:
                if a.type == "url_citation" and a.url and a.url not in hits:
                    hits[a.url] = SearchHit(title=a.title or "", url=a.url,
                                            content=citing_passage(part.text, a.start_index, a.end_index))
    for item in answer.output:  # consulted but not cited: weaker, so after the citations
        for source in item.action.sources if item.action else []:
            if source.url and source.url not in hits:
                hits[source.url] = SearchHit(url=source.url)
    ranked = list(hits.values())
    for rank, hit in enumerate(ranked, 1):
        hit.score = round(1.0 / rank, 4)
    return ranked


class OpenAIProvider(KeyedApiProvider):
    name = "openai"
    key_env = "OPENAI_API_KEY"

    def __init__(self, settings: ToolSettings | None = None):
        s = settings or get_tool_settings()
        # A searching model takes tens of seconds: give it a longer leash than a search API.
        slow = s.model_copy(update={"read_timeout_s": max(s.read_timeout_s, 90.0),
                                    "total_timeout_s": max(s.total_timeout_s, 120.0)})
        super().__init__(s, http_settings=slow)

    def cache_identity(self) -> dict:
        return {"base": self.api.base_url, "model": self.settings.openai_search_model}

    async def _search(self, req: SearchRequest) -> SearchResponse:
        tool: dict = {"type": "web_search"}
        country, _ = region_parts(req.region)
        if country and len(country) == 2:
            tool["user_location"] = {"type": "approximate", "country": country.upper()}
        if req.include_domains:
            tool["filters"] = {"allowed_domains": req.include_domains}
        wanted = req.max_results * req.page
        instructions = (f"Search the web and answer briefly. Cite at least {wanted} distinct sources inline "
                        "where possible; each claim next to its source.")
        if req.freshness:
            instructions += f" Prefer sources published in {_WINDOW[req.freshness]}."
        if req.exclude_domains:
            instructions += " Do not use these sites: " + ", ".join(req.exclude_domains) + "."
        body = {"model": self.settings.openai_search_model, "input": req.query, "instructions": instructions,
                "tools": [tool], "tool_choice": "auto", "include": ["web_search_call.action.sources"],
                "store": False}
        data = await self.api.request_json("POST", "/responses", json_body=body,
                                           headers={"Authorization": f"Bearer {self._key}"})
        hits = hits_from_output(parse(_Answer, data, self.name))
        skip = (req.page - 1) * req.max_results
        return SearchResponse(results=hits[skip:], metadata=SearchMetadata(query=req.query, provider=self.name,
                                                                           total_results=len(hits)))
