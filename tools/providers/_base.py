"""What every web search provider shares: settings, query policy, cache, clean hits.

Subclasses only translate one validated SearchRequest to their API in `_search`; `run` wraps that
with the deny rules, the persistent cache and the cleaning every hit gets (canonical URL without
tracking parameters, plain-text title and snippet, domain filters, one hit per page).
"""

from __future__ import annotations

import html
import logging
import re
from datetime import datetime
from collections.abc import Callable
from typing import TypeVar

import httpx
from pydantic import BaseModel, SecretStr, ValidationError

from tools.base import AuthError, ParseError, SearchHit, SearchProvider, SearchRequest, SearchResponse, ToolError
from tools.cache import get_cache
from tools.http import ApiClient
from tools.search import check_query, query_for_log
from tools.settings import ToolSettings, get_tool_settings
from tools.urls import canonical_url, dedup_key, host_of

log = logging.getLogger("deep_research.tools.providers")
M = TypeVar("M", bound=BaseModel)
_TAG = re.compile(r"<[^>]+>")


def require_key(secret: SecretStr | None, provider: str, env: str) -> str:
    """The secret's value, or AuthError telling the user which variable to set."""
    value = secret.get_secret_value().strip() if secret else ""
    if not value:
        raise AuthError(f"{provider} needs an API key: set {env} in the environment", provider=provider)
    return value


def parse(model: type[M], data: object, provider: str) -> M:
    """Validate an API answer against the fields we use; a surprise becomes ParseError."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ParseError(f"{provider} answered in an unexpected shape ({where}: {first['msg']}); "
                         "the API may have changed", provider=provider) from None


def plain(text: str | None) -> str:
    """Snippet text without HTML tags or entities (Brave and SearXNG send highlighted HTML)."""
    return " ".join(html.unescape(_TAG.sub("", text or "")).split())


def iso_date(value: str | None) -> str | None:
    """ISO date (YYYY-MM-DD) from the formats APIs use; the raw string when it is something else."""
    if not value:
        return None
    value = value.strip()
    try:
        return datetime.fromisoformat(value).date().isoformat()
    except ValueError:
        pass
    for fmt in ("%b %d, %Y", "%d %b %Y", "%B %d, %Y"):
        try:
            return datetime.strptime(value, fmt).date().isoformat()
        except ValueError:
            continue
    return value


def region_parts(region: str | None) -> tuple[str | None, str | None]:
    """(country, language) from a region written country-language as DuckDuckGo does ("us-en", "de")."""
    if not region:
        return None, None
    country, _, language = region.lower().replace("_", "-").partition("-")
    return country or None, language or None


def site_filters(req: SearchRequest) -> str:
    """site: operators for engines that take them in the query."""
    inc = " OR ".join(f"site:{d}" for d in req.include_domains)
    exc = " ".join(f"-site:{d}" for d in req.exclude_domains)
    return " ".join(p for p in (f"({inc})" if len(req.include_domains) > 1 else inc, exc) if p)


def _domain_match(host: str, domains: list[str]) -> bool:
    return any(host == d or host.endswith("." + d) for d in (x.lower().lstrip(".") for x in domains))


def clean_hits(hits: list[SearchHit], provider: str, req: SearchRequest) -> list[SearchHit]:
    """Canonical URLs, plain text, domain filters applied, duplicates and unusable URLs dropped."""
    out, seen = [], set()
    for hit in hits:
        try:
            url = canonical_url(hit.url)
            key, host = dedup_key(url), host_of(url)
        except ToolError:
            continue
        if not url.startswith(("http://", "https://")) or key in seen:
            continue
        if req.include_domains and not _domain_match(host, req.include_domains):
            continue
        if req.exclude_domains and _domain_match(host, req.exclude_domains):
            continue
        seen.add(key)
        out.append(hit.model_copy(update={"url": url, "title": plain(hit.title) or host,
                                          "content": plain(hit.content), "engine": provider}))
        if len(out) >= req.max_results:
            break
    return out


class WebSearchProvider(SearchProvider):
    """Base of the web providers: `run` = deny rules -> cache -> `_search` -> clean hits -> cache."""

    name = "web"

    def __init__(self, settings: ToolSettings | None = None):
        self.settings = settings or get_tool_settings()

    def cache_identity(self) -> dict:
        """What besides the request changes the answer (e.g. the endpoint); part of the cache key."""
        return {}

    async def run(self, req: SearchRequest) -> SearchResponse:
        check_query(req.query, self.settings)
        cache = get_cache(self.settings)
        key = {**self.cache_identity(), **req.model_dump()}
        if cache is not None:
            hit = await cache.get(f"search:{self.name}", key)
            if hit is not None:
                log.debug("%s: cache hit for %s", self.name, query_for_log(req.query))
                resp = SearchResponse.model_validate(hit)
                resp.metadata.time_taken = 0.0
                return resp
        resp = await super().run(req)
        resp.results = clean_hits(resp.results, self.name, req)
        resp.metadata.provider = self.name
        log.info("%s: %d results for %s in %.2fs", self.name, len(resp.results), query_for_log(req.query),
                 resp.metadata.time_taken)
        if cache is not None and resp.results:
            await cache.set(f"search:{self.name}", key, resp.model_dump(mode="json"), ttl_s=self.settings.cache_ttl_s)
        return resp


class KeyedApiProvider(WebSearchProvider):
    """A web provider behind one keyed HTTP API: the key is checked when the provider is built (a
    missing one names `key_env`), one ApiClient calls `<name>_base_url`, and the endpoint is part of
    the cache key."""

    key_env = ""  # the variable that holds the key, e.g. TAVILY_API_KEY (setting `<name>_api_key`)

    def __init__(self, settings: ToolSettings | None = None, *, http_settings: ToolSettings | None = None,
                 error_hook: Callable[[httpx.Response], ToolError | None] | None = None):
        super().__init__(settings)
        self._key = require_key(getattr(self.settings, f"{self.name}_api_key"), self.name, self.key_env)
        self.api = ApiClient(self.name, getattr(self.settings, f"{self.name}_base_url"),
                             http_settings or self.settings, key_env=self.key_env, secrets=[self._key],
                             error_hook=error_hook)

    def cache_identity(self) -> dict:
        return {"base": self.api.base_url}
