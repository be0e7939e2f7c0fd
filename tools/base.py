"""The contracts every search provider and the page reader share.

Pydantic models at the boundary (what a provider returns, what the reader returns), one small error
taxonomy that every surface maps to its own form, and the provider base class that validates the
request once so each provider only translates it to its API.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field, field_validator

MAX_QUERY_CHARS = 400
Freshness = Literal["day", "week", "month", "year"]


class ErrorKind(str, Enum):
    VALIDATION = "validation"
    AUTH = "auth"
    RATE_LIMIT = "rate_limit"
    PROVIDER = "provider"
    TIMEOUT = "timeout"
    PARSE = "parse"
    UNSAFE_URL = "unsafe_url"


class ToolError(Exception):
    """An error a user can act on. The message names the provider and the fix, never a secret."""

    kind: ErrorKind = ErrorKind.PROVIDER

    def __init__(self, message: str, *, provider: str | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.retry_after = retry_after

    def to_dict(self) -> dict:
        return {"kind": self.kind.value, "message": self.message, "provider": self.provider,
                "retry_after": self.retry_after}


class InvalidInput(ToolError):
    kind = ErrorKind.VALIDATION


class AuthError(ToolError):
    kind = ErrorKind.AUTH


class RateLimitError(ToolError):
    kind = ErrorKind.RATE_LIMIT


class ProviderError(ToolError):
    kind = ErrorKind.PROVIDER


class ProviderTimeout(ToolError):
    kind = ErrorKind.TIMEOUT


class ParseError(ToolError):
    kind = ErrorKind.PARSE


class UnsafeURLError(ToolError):
    kind = ErrorKind.UNSAFE_URL


class SearchHit(BaseModel):
    title: str = ""
    url: str
    content: str = Field("", description="Snippet or summary the engine returned.")
    score: float | None = None
    category: str = "general"
    engine: str = ""
    published_date: str | None = None
    raw_content: str | None = Field(
        None, description="Full page text when the provider already has it (local corpus, Tavily)."
    )


class SearchMetadata(BaseModel):
    query: str
    total_results: int | None = None
    time_taken: float = 0.0
    provider: str


class SearchResponse(BaseModel):
    results: list[SearchHit] = Field(default_factory=list)
    metadata: SearchMetadata
    warnings: list[str] = Field(default_factory=list)


class SearchRequest(BaseModel):
    """A validated search: trimmed non-empty query of at most 400 characters, sane paging."""

    query: str
    max_results: int = Field(8, ge=1, le=50)
    freshness: Freshness | None = None
    region: str | None = Field(None, max_length=16)
    page: int = Field(1, ge=1, le=10)
    include_domains: list[str] = Field(default_factory=list)
    exclude_domains: list[str] = Field(default_factory=list)

    @field_validator("query")
    @classmethod
    def _query_ok(cls, v: str) -> str:
        v = " ".join(v.split())
        if not v:
            raise ValueError("query is empty: give a few words to search for")
        if len(v) > MAX_QUERY_CHARS:
            raise ValueError(f"query is {len(v)} characters; the limit is {MAX_QUERY_CHARS}: shorten it")
        return v


class PageContent(BaseModel):
    url: str
    final_url: str
    title: str = ""
    published_date: str | None = None
    text: str = Field("", description="Markdown text of the window [start_char, start_char + len(text)).")
    start_char: int = 0
    total_chars: int = 0
    truncated: bool = Field(False, description="True when text beyond this window exists.")
    content_type: str = ""


class SearchProvider(ABC):
    """A web (or document) search backend. Subclasses implement `_search` for one validated request."""

    name: str = "provider"

    async def search(
        self,
        query: str,
        max_results: int = 8,
        freshness: Freshness | None = None,
        region: str | None = None,
        page: int = 1,
        include_domains: list[str] | None = None,
        exclude_domains: list[str] | None = None,
    ) -> SearchResponse:
        req = validate_request(query=query, max_results=max_results, freshness=freshness, region=region,
                               page=page, include_domains=include_domains or [],
                               exclude_domains=exclude_domains or [])
        return await self.run(req)

    async def run(self, req: SearchRequest) -> SearchResponse:
        t0 = time.perf_counter()
        resp = await self._search(req)
        resp.metadata.time_taken = round(time.perf_counter() - t0, 4)
        return resp

    @abstractmethod
    async def _search(self, req: SearchRequest) -> SearchResponse: ...

    async def aclose(self) -> None:  # providers holding clients override this
        return None


def validate_request(**kwargs) -> SearchRequest:
    """Build a SearchRequest, turning pydantic's error into one InvalidInput naming field and fix."""
    from pydantic import ValidationError

    try:
        return SearchRequest(**kwargs)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "request"
        raise InvalidInput(f"{field}: {first['msg'].removeprefix('Value error, ')}") from None
