"""search: one sub-query's pipeline, the node the fan-out sends each sub-query into.

It runs the provider tool, then reads the best new pages as soon as this sub-query's own results are
in (never waiting for slower sub-queries), ranks their passages against the sub-query with BM25, and
returns sources and passages through the parent's reducers.

It is one node, not a subgraph of two: a subgraph costs its own Pregel loop and a checkpoint per
inner step for each sub-query, which under load doubled the time between a research's steps. A run
resumed after a crash re-runs only the sub-queries that had not finished, and a search they had
already made is answered by the cache.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from langgraph.runtime import Runtime

from graph.llm import elapsed_ms
from graph.progress import emit
from graph.settings import ResearchSettings, settings_from
from graph.state import Passage, QueryTask, Source, SubQuery, add_stats
from tools.base import PageContent, SearchHit, SearchProvider, ToolError
from tools.passages import rank_passages, split_passages

log = logging.getLogger("deep_research.search")
PASSAGES_PER_PAGE = 4
READ_MAX_CHARS = 40_000  # enough text for passage ranking; the long tail of a page rarely helps
_provider_cache: dict[tuple, list[SearchProvider]] = {}
_inflight: dict[str, asyncio.Future] = {}
_claims: OrderedDict[str, set[str]] = OrderedDict()  # run_key -> page keys a task has claimed


def _ready_providers(settings: ResearchSettings) -> list[SearchProvider] | None:
    """The run's providers when nothing has to be built (injected, or built before), else None."""
    if settings._search_providers is not None:
        return settings._search_providers
    return _provider_cache.get((tuple(settings.providers), settings.corpus))


def search_providers(settings: ResearchSettings) -> list[SearchProvider]:
    """Providers for this run: injected ones, else built once per provider set and corpus."""
    ready = _ready_providers(settings)
    if ready is not None:
        return ready
    from tools.providers import build_providers

    built = _provider_cache[(tuple(settings.providers), settings.corpus)] = build_providers(
        settings.providers, corpus=settings.corpus)
    return built


async def web_search(sq: SubQuery, settings: ResearchSettings) -> dict:
    """The provider tool's hits for one sub-query, as a partial update plus "hits" (or "search_error")."""
    t0 = time.perf_counter()
    from tools.lc_tools import web_search_tool

    providers = _ready_providers(settings)
    if providers is None:  # built off the loop: a first build reads files (the local corpus's index)
        providers = await asyncio.to_thread(search_providers, settings)
    tool = web_search_tool(providers)
    try:
        msg = await tool.ainvoke({"type": "tool_call", "id": sq["id"], "name": tool.name, "args": {
            "query": sq["query"], "max_results": settings.results_per_query,
            "freshness": settings.freshness, "region": settings.region,
            "include_domains": settings.include_domains, "exclude_domains": settings.exclude_domains}})
    except ToolError as e:
        warning = f"Search failed for '{sq['query']}': {e.message}"
        return {"hits": [], "search_error": e.message, "warnings": [warning],
                "sub_queries": [{**sq, "status": "failed", "error": e.message}],
                "stats": {"searches": 1, "stage_ms": {"search": elapsed_ms(t0)}}}
    resp = msg.artifact
    return {"hits": list(resp.results), "warnings": list(resp.warnings),
            "stats": {"searches": 1, "stage_ms": {"search": elapsed_ms(t0)}}}


async def _read(hit: SearchHit) -> tuple[str, str, str | None]:
    """(text, title, published_date) of a hit: the provider's full text, else the page itself."""
    if hit.raw_content:
        return hit.raw_content, hit.title, hit.published_date
    page = await _fetch_once(hit.url)
    if not page.text.strip():
        raise ToolError(f"no readable text at {hit.url}")
    return page.text, page.title or hit.title, page.published_date or hit.published_date


async def _fetch_once(url: str) -> PageContent:
    """Read a page; sub-queries of a round that found the same URL at once share one fetch."""
    from tools.reader import read_page

    fut = _inflight.get(url)
    if fut is None:
        fut = _inflight[url] = asyncio.ensure_future(read_page(url, max_chars=READ_MAX_CHARS))
        fut.add_done_callback(lambda _: _inflight.pop(url, None))
    return await asyncio.shield(fut)


async def read_best(hits: list[SearchHit], want: int, room: int, run_key: str,
                    ) -> tuple[list[tuple[SearchHit, str, str, str | None]], list[str], set[str]]:
    """Read up to `want` pages concurrently, in the engines' order, starting the next candidate
    whenever a read fails, so one dead link costs one page's latency, not a second wave of reads.

    Parallel sub-queries of a run often find the same URLs. A page is claimed for the run when a
    task starts reading it, and tasks prefer pages nobody has claimed, so a round reads distinct
    pages; only a task's own claims use its `room` (new registry entries). When no unclaimed page
    is left, a sibling's page is read for this sub-query's passages (the fetch is shared).
    """
    from tools.urls import dedup_key

    queue = list(hits)
    taken = _claims.setdefault(run_key, set())
    _claims.move_to_end(run_key)
    while len(_claims) > 256:  # forget old runs
        _claims.popitem(last=False)
    mine: set[str] = set()
    done: list[tuple[SearchHit, str, str, str | None]] = []
    errors: list[str] = []
    running: dict[asyncio.Task, SearchHit] = {}

    def start_next() -> None:
        # the best page no sibling has claimed, while room lasts; else the best claimed one
        # (read for this sub-query's passages, its registry entry is the sibling's)
        pick = None
        if len(mine) < room:
            pick = next((h for h in queue if dedup_key(h.url) not in taken), None)
        if pick is None:
            pick = next((h for h in queue if dedup_key(h.url) in taken), None)
        if pick is None:
            return
        queue.remove(pick)
        key = dedup_key(pick.url)
        if key not in taken:
            taken.add(key)
            mine.add(key)
        running[asyncio.ensure_future(_read(pick))] = pick

    for _ in range(want):
        start_next()
    while running:
        finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for task in finished:
            hit = running.pop(task)
            exc = task.exception()
            if exc is None:
                text, title, published = task.result()
                done.append((hit, text, title, published))
            else:
                errors.append(f"{hit.url}: {getattr(exc, 'message', None) or type(exc).__name__}")
                if len(done) + len(running) < want:
                    start_next()
    order = {h.url: i for i, h in enumerate(hits)}
    done.sort(key=lambda d: order[d[0].url])  # keep the engines' ranking, not arrival order
    return done, errors, mine


async def read_pages(task: QueryTask, hits: list[SearchHit], settings: ResearchSettings) -> dict:
    """Read the best new pages among a sub-query's hits: its sources, passages and finished record."""
    t0 = time.perf_counter()
    sq = task["sub_query"]
    from tools.urls import dedup_key

    known = set(task.get("known_keys", []))
    fresh: list[SearchHit] = []
    for hit in hits:
        key = dedup_key(hit.url)
        if key not in known:
            known.add(key)
            fresh.append(hit)
    want = settings.resolved().pages_per_query
    emit("reading", f"Reading {min(want, len(fresh))} of {len(fresh)} new results for '{sq['query']}'",
         query_id=sq["id"], pages=min(want, len(fresh)))
    read, errors, mine = await read_best(fresh, want, max(0, task.get("room", 0)), task.get("run_key", ""))

    sources: list[Source] = []
    passages: list[Passage] = []
    for hit, text, title, published in read:
        key = dedup_key(hit.url)
        sources.append({"id": 0, "url": hit.url, "key": key, "title": title, "snippet": hit.content[:400],
                        "published_date": published, "engine": hit.engine, "query_id": sq["id"],
                        "read": True, "chars": len(text)})
        chunks = split_passages(text)
        for i, score in rank_passages(sq["query"], chunks, PASSAGES_PER_PAGE):
            passages.append({"key": key, "query_id": sq["id"], "text": chunks[i], "score": round(score, 4)})
    warnings = [f"Could not read {len(errors)} page(s) for '{sq['query']}' (e.g. {errors[0]})"] if errors else []
    done: SubQuery = {**sq, "status": "done", "hits": len(hits),
                      "new_sources": sum(s["key"] in mine for s in sources), "pages_read": len(sources),
                      "error": None}
    return {"sources": sources, "passages": passages, "sub_queries": [done], "warnings": warnings,
            "stats": {"pages_read": len(sources), "page_errors": len(errors),
                      "stage_ms": {"read": elapsed_ms(t0)}}}


async def search(task: QueryTask, runtime: Runtime[ResearchSettings]) -> dict:
    """One sub-query: web_search, then read_pages; a failed search ends it with a warning."""
    settings = settings_from(runtime.context)
    found = await web_search(task["sub_query"], settings)
    hits, error = found.pop("hits"), found.pop("search_error", None)
    if error:
        return found
    read = await read_pages(task, hits, settings)
    return {**read, "warnings": found["warnings"] + read["warnings"],
            "stats": add_stats(found["stats"], read["stats"])}
