"""Search providers as LangChain tools: the graph's web_search node runs these, and any other
LangChain or LangGraph agent can bind them as they are."""

from __future__ import annotations

from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field

from tools.base import Freshness, SearchProvider, SearchResponse, validate_request


class WebSearchArgs(BaseModel):
    query: str = Field(description="Search-engine query, a few keywords; at most 400 characters.")
    max_results: int = Field(8, ge=1, le=20, description="Results to return.")
    freshness: Freshness | None = Field(None, description="Only results from the last day/week/month/year.")
    region: str | None = Field(None, description="Region code such as us-en or de-de.")
    page: int = Field(1, ge=1, le=10, description="Result page.")
    include_domains: list[str] = Field(default_factory=list, description="Only these domains.")
    exclude_domains: list[str] = Field(default_factory=list, description="Never these domains.")


def _as_text(resp: SearchResponse) -> str:
    lines = [f"{i}. {h.title}\n   {h.url}\n   {h.content[:300]}" for i, h in enumerate(resp.results, 1)]
    lines += [f"warning: {w}" for w in resp.warnings]
    return "\n".join(lines) or "No results."


def web_search_tool(providers: list[SearchProvider], name: str = "web_search") -> StructuredTool:
    """One tool over the given providers (fused by reciprocal rank when several). The ToolMessage's
    artifact is the SearchResponse; its content is a short text listing for chat models."""
    from tools.search import search_all

    names = ", ".join(p.name for p in providers)

    async def run(**kwargs) -> tuple[str, SearchResponse]:
        resp = await search_all(providers, validate_request(**kwargs))
        return _as_text(resp), resp

    return StructuredTool.from_function(
        coroutine=run, name=name, args_schema=WebSearchArgs, response_format="content_and_artifact",
        description=f"Search the web ({names}) and return titles, URLs and snippets.")
