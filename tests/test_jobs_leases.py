"""Several server replicas on one store: ownership leases, take-over after a crash, cancel across
replicas. Each replica is a real registry (graph.jobs) in this process with its own store
connection and owner id, on one SQLite file, and on Postgres when DEEP_RESEARCH_TEST_POSTGRES_URL
is set. Leases are short (LEASE seconds) so expiry takes a moment, not half a minute."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from graph.jobs import ResearchJobs, ServerSettings, open_jobs
from tests.mcp_helpers import QUESTION, OfflineModels
from tests.test_persistence import BACKENDS, pg_schema, store_url  # noqa: F401 (pg_schema is a fixture)
from tools.settings import reset_tool_settings

LEASE = 1.2


@pytest.fixture(autouse=True)
def _fresh_data_dir():
    reset_tool_settings()
    yield
    reset_tool_settings()


@contextlib.asynccontextmanager
async def replica(url: str | None, models: OfflineModels, *, auto_resume: bool = False,
                  crash: bool = False) -> AsyncIterator[ResearchJobs]:
    """A server's registry. crash=True leaves like kill -9 would: nothing written, no lease released."""
    config = ServerSettings(warm_up=False, lease_s=LEASE, database_url=url, rate_limit_calls=0)
    jobs, stack = await open_jobs(config, prepare=models, auto_resume=auto_resume)
    try:
        yield jobs
    finally:
        if crash:
            await _crash(jobs)
        await stack.aclose()


async def _crash(jobs: ResearchJobs) -> None:
    for task in list(jobs._background):  # no more renewals
        task.cancel()
    for job in jobs.jobs.values():
        if job.task and not job.task.done():
            job.stop_reason = "lost"  # stops without a write, as a dead process writes nothing
            job.task.cancel()
    await asyncio.gather(*[j.task for j in jobs.jobs.values() if j.task], return_exceptions=True)
    jobs.store.release = _nothing  # the registry's own shutdown must not release either


async def _nothing(*_: object) -> list[str]:
    return []


async def until(predicate, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def reached(jobs: ResearchJobs, rid: str, stages: set[str]) -> None:
    async def ok() -> bool:
        rec = await jobs.store.get(rid)
        return rec.status == "running" and (rec.progress or {}).get("stage") in stages
    await until(ok, what=f"{rid} to reach {stages}")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_starting_replica_leaves_a_live_research_alone(request, backend):
    url = store_url(request, backend)
    a_models, b_models = OfflineModels(latency_s=1.0, sufficient=False), OfflineModels()
    async with replica(url, a_models) as a:
        # one page per query: several rounds before the 8-document sample corpus is read up
        job = await a.submit(QUESTION, {"depth": "deep", "pages_per_query": 1})
        await reached(a, job.research_id, {"searching", "extracting", "reflecting"})
        async with replica(url, b_models, auto_resume=True) as b:
            await asyncio.sleep(2.5 * LEASE)  # B's startup, then several of its lease rounds
            rec = await b.store.get(job.research_id)
            assert rec.status == "running" and rec.owner == a.owner and rec.leased
            assert job.research_id not in b.jobs and b_models.models == []
            # status from B is the record A keeps current: its latest progress
            assert (await b.lookup(job.research_id)).progress["stage"] in {"searching", "extracting", "reflecting",
                                                                          "writing", "planning"}
            await asyncio.wait_for(asyncio.shield(job.task), 60)
            assert job.status == "complete"
            assert (await b.store.get(job.research_id)).status == "complete"
    assert b_models.models == []  # B never ran a step of it


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_crashed_replicas_research_is_resumed_once(request, backend):
    url = store_url(request, backend)
    a_models = OfflineModels(latency_s=0.3, sufficient=2)
    b_models, c_models = OfflineModels(sufficient=2), OfflineModels(sufficient=2)
    async with replica(url, a_models, crash=True) as a:
        rid = (await a.submit(QUESTION, {"depth": "standard"})).research_id
        await reached(a, rid, {"reflecting"})  # round 1 checkpointed
    crashed_at = time.monotonic()
    # two replicas race for it as soon as A's lease runs out
    async with replica(url, b_models, auto_resume=True) as b, replica(url, c_models, auto_resume=True) as c:
        rec = await b.store.get(rid)
        if time.monotonic() - crashed_at < LEASE * 0.5:
            assert rec.status == "running" and rec.owner == a.owner  # not taken while the lease may be live

        async def finished() -> bool:
            return (await b.store.get(rid)).finished
        await until(finished, timeout=60, what="the resumed research to finish")
        rec = await b.store.get(rid)
        takers = [r for r in (b, c) if rid in r.jobs]
    assert rec.status == "complete", rec.error
    assert len(takers) == 1 and rec.owner == takers[0].owner
    assert len(b_models.models) + len(c_models.models) == 1  # resumed exactly once
    kinds = [call["kind"] for call in b_models.calls() + c_models.calls()]
    assert kinds and "Plan" not in kinds  # from A's checkpoint: the plan was not paid for twice


@pytest.mark.parametrize("backend", BACKENDS)
async def test_cancel_through_another_replica_keeps_what_was_found(request, backend):
    url = store_url(request, backend)
    a_models = OfflineModels(latency_s=0.25, sufficient=False)  # loops until max_rounds unless cancelled
    async with replica(url, a_models) as a, replica(url, OfflineModels()) as b:
        job = await a.submit(QUESTION, {"depth": "deep"})
        await reached(a, job.research_id, {"reflecting"})
        t0 = time.monotonic()
        out = await b.cancel(job.research_id)
        took = time.monotonic() - t0
        assert job.finished and job.status == "partial"  # A stopped it, keeping what it found
        assert out.status == "partial" and out.result["stop_reason"] == "cancelled"
        assert out.result["sources"] and "[" in out.result["report"]
        assert took < LEASE + 2  # noticed at A's next renewal (every LEASE / 3)
        # cancelling it again, from either side, changes nothing
        assert (await b.cancel(job.research_id)).status == "partial"


async def test_cancel_of_an_abandoned_research_closes_it(request):
    a_models = OfflineModels(latency_s=0.3, sufficient=2)
    async with replica(None, a_models, crash=True) as a:
        rid = (await a.submit(QUESTION, {"depth": "standard"})).research_id
        await reached(a, rid, {"searching", "extracting", "reflecting"})
    await asyncio.sleep(LEASE)
    async with replica(None, OfflineModels()) as b:  # no auto-resume: it stays orphaned
        out = await b.cancel(rid)
        assert out.status == "cancelled" and not out.leased
        with pytest.raises(Exception, match="cancelled"):
            await b.resume(rid)
