"""Several providers as one: query policy, concurrent search, reciprocal rank fusion.

A provider that fails (bad key, quota, outage) is skipped with a warning while the others answer;
only when every provider fails does the caller get an error, the most actionable one.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from functools import lru_cache

from tools.base import (AuthError, ErrorKind, InvalidInput, ProviderError, ProviderTimeout, RateLimitError,
                        SearchHit, SearchMetadata, SearchProvider, SearchRequest, SearchResponse, ToolError,
                        validate_request)
from tools.settings import ToolSettings, get_tool_settings
from tools.urls import dedup_key

log = logging.getLogger("deep_research.tools.search")

RRF_K = 60  # the constant from Cormack et al. (2009); damps the head of each list


def query_for_log(query: str) -> str:
    """The query itself only under debug logging; otherwise a short hash that still correlates."""
    if log.isEnabledFor(logging.DEBUG):
        return repr(query)
    return "q#" + hashlib.sha256(query.encode()).hexdigest()[:12]


@lru_cache(maxsize=64)
def _compile_rules(rules: tuple[str, ...]) -> list[tuple[str, re.Pattern]]:
    compiled = []
    for rule in rules:
        rule = rule.strip()
        if not rule:
            continue
        if len(rule) > 2 and rule.startswith("/") and rule.endswith("/"):
            pattern = rule[1:-1]  # /regex/ is a pattern, anything else a keyword
        else:
            pattern = r"(?<!\w)" + re.escape(rule) + r"(?!\w)"
        try:
            compiled.append((rule, re.compile(pattern, re.IGNORECASE)))
        except re.error as e:
            raise InvalidInput(f"query deny rule {rule!r} is not a valid pattern ({e}); fix DEEP_RESEARCH_QUERY_DENY") \
                from None
    return compiled


def check_query(query: str, settings: ToolSettings | None = None) -> None:
    """Raise InvalidInput naming the first deny rule (DEEP_RESEARCH_QUERY_DENY) the query matches."""
    s = settings or get_tool_settings()
    for rule, pattern in _compile_rules(tuple(s.query_deny)):
        if pattern.search(query):
            raise InvalidInput(f"query refused by the deny rule {rule!r} (DEEP_RESEARCH_QUERY_DENY): "
                               "rephrase it or ask the operator")


def _key(url: str) -> str:
    try:
        return dedup_key(url)
    except ToolError:  # e.g. local:// documents without a host: their URL is already unique
        return url


def fuse(responses: list[SearchResponse], query: str, max_results: int) -> SearchResponse:
    """Reciprocal rank fusion: score = sum of 1/(k + rank) over the lists a URL appears in.

    Duplicates (same dedup key) merge into the best-ranked hit, which keeps its own text and fills
    what it lacks from the others; `engine` lists every provider that found it.
    """
    scores: dict[str, float] = {}
    merged: dict[str, SearchHit] = {}
    engines: dict[str, list[str]] = {}
    best_rank: dict[str, int] = {}
    for resp in responses:
        seen: set[str] = set()
        for rank, hit in enumerate(resp.results, 1):
            key = _key(hit.url)
            if key in seen:  # a provider listing a page twice does not vote twice
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank)
            engine = hit.engine or resp.metadata.provider
            if key not in merged or rank < best_rank[key]:
                previous = merged.get(key)
                merged[key] = hit.model_copy()
                best_rank[key] = rank
                if previous:
                    _fill(merged[key], previous)
            else:
                _fill(merged[key], hit)
            names = engines.setdefault(key, [])
            for name in engine.split(","):
                if name.strip() and name.strip() not in names:
                    names.append(name.strip())
    order = sorted(scores, key=lambda k: (-scores[k], best_rank[k]))[:max_results]
    results = []
    for key in order:
        hit = merged[key]
        hit.score = round(scores[key], 6)
        hit.engine = ",".join(engines[key])
        results.append(hit)
    providers = [r.metadata.provider for r in responses]
    return SearchResponse(
        results=results,
        metadata=SearchMetadata(query=query, total_results=len(scores), provider="+".join(providers),
                                time_taken=max((r.metadata.time_taken for r in responses), default=0.0)),
        warnings=[w for r in responses for w in r.warnings])


def _fill(target: SearchHit, other: SearchHit) -> None:
    for field in ("title", "content", "published_date", "raw_content"):
        if not getattr(target, field) and getattr(other, field):
            setattr(target, field, getattr(other, field))


# Which error to raise when every provider failed: the one the user can most likely act on.
_PRIORITY = [ErrorKind.VALIDATION, ErrorKind.AUTH, ErrorKind.RATE_LIMIT, ErrorKind.TIMEOUT, ErrorKind.PROVIDER,
             ErrorKind.PARSE, ErrorKind.UNSAFE_URL]


async def search_all(providers: list[SearchProvider], req: SearchRequest, *,
                     settings: ToolSettings | None = None) -> SearchResponse:
    """Run every provider concurrently and fuse what they found; skip (with a warning) those that fail."""
    if not providers:
        raise InvalidInput("no search provider configured: choose at least one (e.g. duckduckgo)")
    req = validate_request(**req.model_dump())  # re-check: callers may have built it with model_construct
    check_query(req.query, settings or next((p.settings for p in providers if hasattr(p, "settings")), None))
    t0 = time.perf_counter()
    outcomes = await asyncio.gather(*(p.run(req) for p in providers), return_exceptions=True)
    answers: list[SearchResponse] = []
    failures: list[tuple[SearchProvider, ToolError]] = []
    for provider, outcome in zip(providers, outcomes):
        if isinstance(outcome, SearchResponse):
            answers.append(outcome)
            continue
        if isinstance(outcome, asyncio.CancelledError):
            raise outcome
        if not isinstance(outcome, ToolError):
            log.error("%s failed unexpectedly", provider.name, exc_info=outcome)
            outcome = ProviderError(f"{provider.name} failed unexpectedly ({type(outcome).__name__})",
                                    provider=provider.name)
        failures.append((provider, outcome))
    if not answers:
        raise _most_useful(failures)
    if len(answers) > 1:
        fused = fuse(answers, req.query, req.max_results)
    else:  # one answer: keep the provider's own ranking and scores
        fused = answers[0].model_copy(update={"results": answers[0].results[:req.max_results]})
    fused.warnings = [f"{p.name} skipped: {e.message}" for p, e in failures] + fused.warnings
    fused.metadata.time_taken = round(time.perf_counter() - t0, 4)
    log.info("search %s: %d results from %s (%d skipped)", query_for_log(req.query), len(fused.results),
             fused.metadata.provider, len(failures))
    return fused


def _most_useful(failures: list[tuple[SearchProvider, ToolError]]) -> ToolError:
    if len(failures) == 1:
        return failures[0][1]
    errors = sorted((e for _, e in failures), key=lambda e: _PRIORITY.index(e.kind))
    first = errors[0]
    summary = "; ".join(f"{p.name}: {e.message}" for p, e in failures)
    retry_after = min((e.retry_after for e in errors if e.retry_after is not None), default=None)
    cls = {ErrorKind.AUTH: AuthError, ErrorKind.RATE_LIMIT: RateLimitError,
           ErrorKind.TIMEOUT: ProviderTimeout}.get(first.kind, type(first))
    return cls(f"every search provider failed: {summary}", provider=first.provider, retry_after=retry_after)
