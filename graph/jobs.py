"""Researches owned by a server process, not by the call that started them.

A tool call submits a research and waits for it as long as its client will; if the client gives up
(or asked not to wait) the research runs on and the result is collected later by id. This module
holds that registry, its admission rules (a cap on concurrent runs, a bounded queue, a per-client
rate limit) and its lifecycle (resume after a restart, stop at shutdown with progress kept).

Several servers (replicas) may share one store. Each registry has an owner id; it leases the
researches it runs and renews the leases every `lease_s / 3`. Another replica resumes a research
only once its lease has expired (its owner crashed) or was released (its owner shut down), and a
cancel asked of a replica that does not run the research is written to the record for the owner
to honour at its next renewal.

LangGraph is imported on the first research, not at import time: a cold MCP server must answer
`tools/list` quickly.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from graph.cpu_gate import CpuGate
from graph.persistence import RecordStatus, ResearchRecord, ResearchStore, open_checkpointer, open_store

log = logging.getLogger("deep_research.jobs")
Prepare = Callable[[Any], Any]  # ResearchSettings -> ResearchSettings (tests inject models here)
ProgressCallback = Callable[[dict[str, Any]], Awaitable[None]]


class ServerSettings(BaseSettings):
    """How a server runs researches: admission, waiting, logging, resume. Environment: DEEP_RESEARCH_*."""

    model_config = SettingsConfigDict(env_prefix="DEEP_RESEARCH_", extra="ignore", populate_by_name=True)

    max_concurrent_researches: int = Field(2, ge=1, le=64, description="Researches running at once, at most.")
    cpu_target: float = Field(0.8, gt=0, le=1, description=(
        "Below the cap, a queued research starts only while this process uses less than this share of "
        "one CPU core (its event loop is one thread). It keeps each running research's steps quick and "
        "the server responsive under overload, at some throughput; 1 turns it off."))
    queue_size: int = Field(8, ge=0, le=1000, description="Researches waiting for a slot; more are refused.")
    rate_limit_calls: int = Field(20, ge=0, description="Researches a client may start per window; 0 = no limit.")
    rate_limit_window_s: float = Field(600.0, gt=0)
    wait_timeout_s: float = Field(50.0, ge=0, le=3600, description=(
        "How long a deep_research call waits before answering 'running' with a research id; "
        "under the ~60 s after which Claude Desktop and many SDK clients give up."))
    heartbeat_s: float = Field(5.0, gt=0, le=10, description="Progress notification interval while a stage runs.")
    log_every_s: float = Field(15.0, gt=0, description="Progress lines on stderr while researches run.")
    auto_resume: bool | None = Field(None, description=(
        "Resume interrupted researches at startup. Default: on for HTTP, off for stdio."))
    shutdown_grace_s: float = Field(6.0, ge=0, le=9)
    database_url: str | None = Field(None, description="postgresql://... for records and checkpoints.")
    mcp_token: SecretStr | None = Field(None, description="Bearer token(s) for HTTP, comma-separated.")
    warm_up: bool = Field(True, description="Import the research graph in the background after startup.")
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field("auto", description=(
        "The server's event loop: auto = uvloop where it is installed (Linux, macOS), else asyncio's."))
    lease_s: float = Field(15.0, ge=0.5, le=600, description=(
        "How long a research stays owned by its server without a renewal (renewed every third of it). "
        "After a crash, another replica resumes it once this has passed."))


class AdmissionError(Exception):
    """A research was refused for now; `retry_after` says when trying again makes sense."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class UnknownResearch(LookupError):
    pass


class RateLimiter:
    """At most `calls` per `window_s` per client key (sliding window)."""

    def __init__(self, calls: int, window_s: float):
        self.calls = calls
        self.window_s = window_s
        self._seen: dict[str, deque[float]] = defaultdict(deque)

    def check(self, key: str) -> None:
        if self.calls <= 0:
            return
        now = time.monotonic()
        seen = self._seen[key]
        while seen and seen[0] <= now - self.window_s:
            seen.popleft()
        if len(seen) >= self.calls:
            wait = seen[0] + self.window_s - now
            raise AdmissionError(f"rate limit: {self.calls} researches per {self.window_s:.0f} s for this client; "
                                 f"retry in {wait:.0f} s", retry_after=round(wait, 1))
        seen.append(now)


@dataclass
class Job:
    """One research this process is running (or has queued)."""

    research_id: str
    question: str
    overrides: dict[str, Any]
    settings: Any = None  # ResearchSettings checked at submit; rebuilt from overrides on resume
    status: RecordStatus = "queued"
    progress: dict[str, Any] = field(default_factory=lambda: {"stage": "queued", "message": "Queued",
                                                              "ts": time.time()})
    events: list[dict[str, Any]] = field(default_factory=list)
    result: Any = None  # ResearchResult once finished
    error: str | None = None
    started: float = field(default_factory=time.time)
    task: asyncio.Task | None = None
    run: Any = None  # graph.runner.ResearchRun once it has a slot
    stop_reason: str | None = None  # "cancelled" (by a user) or "shutdown"
    unsaved: dict[str, Any] | None = None  # progress not yet in the record
    saving: asyncio.Task | None = None  # the task writing it
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def finished(self) -> bool:
        return self.status not in ("queued", "running", "interrupted") or (
            self.task is not None and self.task.done())

    @property
    def elapsed_s(self) -> float:
        return round(time.time() - self.started, 1)


class ResearchJobs:
    """The registry: submit, wait, status, cancel, resume, shut down."""

    def __init__(self, store: ResearchStore, config: ServerSettings | None = None, *,
                 prepare: Prepare | None = None, checkpoint_url: str | None = None):
        self.store = store
        self.config = config or ServerSettings()
        self.prepare = prepare
        self.checkpoint_url = checkpoint_url or self.config.database_url
        self.jobs: dict[str, Job] = {}
        self.limiter = RateLimiter(self.config.rate_limit_calls, self.config.rate_limit_window_s)
        self.closing = False
        self._slots = asyncio.Semaphore(self.config.max_concurrent_researches)
        self.gate = CpuGate(self.config.cpu_target)
        self._stack = AsyncExitStack()
        self._checkpointer: Any = None
        self._ck_lock = asyncio.Lock()
        self._background: set[asyncio.Task] = set()
        self.owner = owner_id()
        self._imported: asyncio.Task | None = None
        self.auto_resume = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, auto_resume: bool = False) -> None:
        """Flag researches whose server is gone (lease expired) as interrupted; with auto_resume,
        resume them now and whenever another replica's lease runs out later."""
        self.auto_resume = auto_resume
        await self._expire_dead_local_owners()
        stale = await self.store.mark_interrupted()
        if stale:
            log.info("%d research(es) were interrupted by a crash or shutdown: %s", len(stale), ", ".join(stale))
        self._spawn(self._log_loop())
        if auto_resume:
            await self.resume_unfinished()
        self._spawn(self._lease_loop())

    async def checkpointer(self) -> Any:
        """The shared checkpointer, opened on first use (it imports LangGraph)."""
        async with self._ck_lock:
            if self._checkpointer is None:
                self._checkpointer = await self._stack.enter_async_context(open_checkpointer(self.checkpoint_url))
            return self._checkpointer

    async def shutdown(self, grace_s: float | None = None) -> None:
        """Refuse new work, stop running researches (their finished steps are checkpointed) and
        mark them interrupted, lease released, so another replica or a later start resumes them."""
        self.closing = True
        grace = self.config.shutdown_grace_s if grace_s is None else grace_s
        live = [j for j in self.jobs.values() if j.task is not None and not j.task.done()]
        for job in live:
            job.stop_reason = "shutdown"
            job.task.cancel()
        if live:
            log.info("stopping %d running research(es); they can be resumed later", len(live))
            await asyncio.wait([j.task for j in live], timeout=grace)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.gate.aclose()
        try:  # what did not stop within the grace period is released too
            await self.store.release(self.owner)
        except Exception:
            log.exception("could not release the leases of %s", self.owner)
        await self._stack.aclose()

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def warm_up(self) -> None:
        """Start importing what a research needs (LangGraph, LangChain, providers, the page reader)
        in a thread, now, then freeze the heap. The server calls it once it is up (config.warm_up)."""
        if self._imported is None:
            self._imported = self._spawn(asyncio.to_thread(_import_research_modules))
            self._imported.add_done_callback(lambda _: freeze_heap())

    async def _imports(self) -> None:
        # research code imports in a thread, never on the loop: a first call that arrives during the
        # warm-up waits for it here while other requests are still answered
        self.warm_up()
        await asyncio.shield(self._imported)

    async def _lease_loop(self) -> None:
        """Renew our leases (with the latest progress), honour cancels asked of other replicas, and
        with auto-resume take over researches whose owner has gone."""
        while True:
            await asyncio.sleep(self.config.lease_s / 3)
            try:
                await self.renew_leases()
                if self.auto_resume and not self.closing:
                    await self._expire_dead_local_owners()
                    await self.resume_unfinished()
            except Exception:  # a database hiccup must not end the loop: the next round retries
                log.exception("lease renewal failed")

    async def _expire_dead_local_owners(self) -> None:
        # a server on this machine that was killed cannot release its leases; its pid tells us it is
        # gone, so a restart takes its researches over at once instead of after the lease
        for rec in await self.store.list_unfinished():
            if rec.leased and rec.owner != self.owner and owner_is_dead(rec.owner):
                log.info("research %s: its server %s is gone", rec.research_id, rec.owner)
                await self.store.expire(rec.research_id, rec.owner)

    async def renew_leases(self) -> None:
        """One renewal round (the lease loop runs it every lease_s / 3)."""
        for job in [j for j in self.jobs.values() if not j.finished]:
            if not await self.store.renew(job.research_id, self.owner, self.config.lease_s, _jsonable(job.progress)):
                if job.finished:  # it finished during the renewal
                    continue
                # we stalled past our lease and another replica took it over: stop, write nothing
                log.warning("research %s: lease lost to another server; stopping here", job.research_id)
                job.stop_reason = "lost"
                job.task.cancel()
        for rid in await self.store.cancel_requests(self.owner):
            job = self.jobs.get(rid)
            if job is not None and not job.finished:
                log.info("research %s: cancelled at another server's request", rid)
                await self.cancel(rid)

    async def _log_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.log_every_s)
            for job in self.jobs.values():
                if job.status == "running":
                    log.info("research %s: %.0f s, %s: %s", job.research_id, job.elapsed_s,
                             job.progress.get("stage"), job.progress.get("message"))

    # -- submitting --------------------------------------------------------------------------

    def admit(self, client: str) -> None:
        """Raise AdmissionError when this client may not start another research right now."""
        if self.closing:
            raise AdmissionError("the server is shutting down; retry in a few seconds on a fresh connection",
                                 retry_after=10)
        active = [j for j in self.jobs.values() if not j.finished]
        cap = self.config.max_concurrent_researches + self.config.queue_size
        if len(active) >= cap:
            wait = 30.0
            raise AdmissionError(f"busy: {len(active)} researches are running or queued (limit {cap}); "
                                 f"retry in {wait:.0f} s", retry_after=wait)
        self.limiter.check(client)

    async def submit(self, question: str, overrides: dict[str, Any], *, client: str = "local") -> Job:
        """Validate, admit, record and start a research; returns at once."""
        await self._imports()
        from graph.runner import new_research_id, validate_question
        from graph.settings import make_settings

        question = validate_question(question)
        settings = make_settings(**overrides)  # fail now, with the argument named, not inside the task
        self._check_providers(settings)
        self.admit(client)
        rid = new_research_id()
        clean = {k: v for k, v in overrides.items() if v is not None}
        await self.store.create(rid, question, clean, owner=self.owner, lease_s=self.config.lease_s)
        return self._launch(Job(rid, question, clean, settings=settings), resume=False)

    def _check_providers(self, settings: Any) -> None:
        """Unknown names and missing keys fail the call, not every search of the run."""
        from graph.settings import SettingsError
        from tools.base import ToolError
        from tools.providers import PROVIDERS, build_provider

        for name in settings.providers:
            if name not in PROVIDERS:
                raise SettingsError(f"providers: unknown search provider {name!r}; choose from "
                                    f"{', '.join(PROVIDERS)}")
            if self.prepare is None and name != "local":  # constructing one checks its key, no I/O
                try:
                    build_provider(name)
                except ToolError as e:
                    raise SettingsError(f"providers: {e.message}") from None

    async def resume(self, research_id: str, *, client: str = "local") -> Job:
        """Continue an interrupted research from its last checkpoint (finished ones are returned as is)."""
        job = self.jobs.get(research_id)
        if job is not None and not job.finished:
            return job
        rec = await self.store.get(research_id)
        if rec is None:
            raise UnknownResearch(research_id)
        if rec.status not in ("interrupted", "queued", "running", "failed"):
            raise AdmissionError(f"research {research_id} is {rec.status}; only interrupted or failed "
                                 "researches can be resumed")
        self.admit(client)
        if not await self.store.claim(research_id, self.owner, self.config.lease_s):
            raise AdmissionError(_owned_elsewhere(await self.store.get(research_id) or rec))
        return self._launch(Job(research_id, rec.question, rec.settings), resume=True)

    async def resume_unfinished(self) -> list[str]:
        """Resume the unfinished researches nobody holds a live lease on (auto-resume: at startup
        and at every lease renewal, so a crashed or stopped replica's work is taken over)."""
        ids = []
        for rec in await self.store.list_orphaned():
            job = self.jobs.get(rec.research_id)
            if job is not None and not job.finished:
                continue
            try:
                await self.resume(rec.research_id, client="auto-resume")
                ids.append(rec.research_id)
            except AdmissionError as e:  # busy here, or another replica won the claim
                log.info("not resuming %s now: %s", rec.research_id, e.message)
        if ids:
            log.info("resumed %d interrupted research(es): %s", len(ids), ", ".join(ids))
        return ids

    def _launch(self, job: Job, *, resume: bool) -> Job:
        self.jobs[job.research_id] = job
        job.task = asyncio.ensure_future(self._run(job, resume))
        return job

    # -- running -----------------------------------------------------------------------------

    async def _run(self, job: Job, resume: bool) -> None:
        await self._imports()
        from graph.llm import LLMError
        from graph.runner import ResearchRun
        from graph.settings import SettingsError, make_settings
        from tools.base import ToolError

        status: RecordStatus
        try:
            async with self._slots, self.gate.slot():
                settings = job.settings or make_settings(**job.overrides)
                if self.prepare is not None:
                    settings = self.prepare(settings)
                job.run = run = ResearchRun(job.question, settings, research_id=job.research_id,
                                            checkpointer=await self.checkpointer(),
                                            on_event=lambda e: self._on_event(job, e))
                await self._set(job, "running", {"stage": "starting", "message": "Starting", "ts": time.time()})
                try:
                    result = await run.resume() if resume else await run.start()
                except SettingsError as e:
                    if not resume or "no saved research" not in str(e):
                        raise
                    result = await run.start()  # it stopped before its first checkpoint: start over
            job.result = result
            status = result.status
            await self._finish(job, status, result=result.model_dump(mode="json"))
        except asyncio.CancelledError:
            if job.stop_reason == "lost":
                status = "interrupted"  # the record is the new owner's now: leave it alone
                job.error = "taken over by another server after this one missed its lease renewals"
            elif job.stop_reason == "shutdown":
                status = "interrupted"
                await asyncio.shield(self._finish(job, status, error="stopped by a server shutdown"))
                job.error = "stopped by a server shutdown; resume_research continues it"
            elif job.run is None:
                status = "cancelled"
                await asyncio.shield(self._finish(job, status, error="cancelled before it started"))
                job.error = "cancelled before it started"
            else:
                job.result = job.run.partial("cancelled", "cancelled by request; the report uses what was found")
                status = job.result.status
                await asyncio.shield(self._finish(job, status, result=job.result.model_dump(mode="json")))
        except (SettingsError, LLMError, ToolError) as e:
            status = "failed"
            job.error = getattr(e, "message", None) or str(e)
            await self._finish(job, status, error=job.error)
        except Exception as e:  # never lose the record: keep a readable reason, log the details
            log.exception("research %s failed", job.research_id)
            status = "failed"
            job.error = f"internal error ({e.__class__.__name__}); see the server log"
            await self._finish(job, status, error=job.error)
        job.status = status
        await self._notify(job)

    async def _finish(self, job: Job, status: RecordStatus, **outcome: Any) -> None:
        if job.saving is not None and not job.saving.done():
            await asyncio.wait([job.saving])  # a late progress write must not land after the result
        if not await self.store.finish(job.research_id, status, owner=self.owner, **outcome):
            log.warning("research %s: not recorded as %s: another server owns it now", job.research_id, status)

    async def _on_event(self, job: Job, event: dict[str, Any]) -> None:
        stage_changed = event.get("stage") != job.progress.get("stage")
        job.events.append(event)
        job.progress = event
        await self._notify(job)
        # the record follows stage changes (not every event) so a busy run does not hammer the database,
        # and is written beside the run, not in its way: LangGraph's stream waits for this handler
        # before it takes the next step
        if stage_changed:
            job.unsaved = _jsonable(event)
            if job.saving is None or job.saving.done():
                job.saving = self._spawn(self._save_progress(job))

    async def _save_progress(self, job: Job) -> None:
        while job.unsaved is not None:  # the latest stage wins; earlier unsaved ones are skipped
            progress, job.unsaved = job.unsaved, None
            try:
                await self.store.update_progress(job.research_id, progress, owner=self.owner)
            except Exception:  # the next stage or the lease renewal writes it again
                log.exception("research %s: progress not recorded", job.research_id)

    async def _set(self, job: Job, status: RecordStatus, progress: dict[str, Any]) -> None:
        job.status = status
        await self._on_event(job, progress)
        await self.store.set_status(job.research_id, status, owner=self.owner)

    @staticmethod
    async def _notify(job: Job) -> None:
        async with job.changed:
            job.changed.notify_all()

    # -- reading -----------------------------------------------------------------------------

    async def wait(self, job: Job, timeout: float, on_progress: ProgressCallback | None = None) -> bool:
        """Wait until the job finishes or `timeout` passes, relaying each progress event and a
        heartbeat every `heartbeat_s` while nothing happens. True when finished."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            while seen < len(job.events):
                if on_progress:
                    await on_progress(job.events[seen])
                seen += 1
            if job.finished:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            async with job.changed:
                if seen < len(job.events) or job.finished:
                    continue  # it changed while we relayed: no wait, no missed wake-up
                try:
                    await asyncio.wait_for(job.changed.wait(), min(left, self.config.heartbeat_s))
                except TimeoutError:
                    if on_progress and seen == len(job.events):
                        stage = job.progress.get("stage", "working")
                        await on_progress({"stage": stage, "heartbeat": True, "ts": time.time(),
                                           "message": f"{stage}: still working ({job.elapsed_s:.0f} s)"})

    async def cancel(self, research_id: str, wait_s: float | None = None) -> Job | ResearchRecord:
        """Stop a research and keep what it found (status partial, or cancelled when nothing ran).

        A research another replica runs is asked to stop through its record; its owner notices at
        its next lease renewal. This waits up to `wait_s` (default: one lease) for the outcome."""
        job = self.jobs.get(research_id)
        if job is not None and not job.finished:
            job.stop_reason = "cancelled"
            job.task.cancel()
            await asyncio.wait([job.task])
            return job
        rec = await self.lookup(research_id)
        if not isinstance(rec, ResearchRecord) or rec.finished and rec.status != "interrupted":
            return rec
        if not rec.leased:  # nobody runs it: take it (so no replica resumes it meanwhile) and close it
            if await self.store.claim(research_id, self.owner, self.config.lease_s):
                await self.store.finish(research_id, "cancelled", error="cancelled while interrupted",
                                        owner=self.owner)
                return await self.store.get(research_id) or rec
        await self.store.request_cancel(research_id)
        log.info("research %s runs on %s: cancel requested", research_id, rec.owner)
        deadline = time.monotonic() + (self.config.lease_s if wait_s is None else wait_s)
        while time.monotonic() < deadline:
            await asyncio.sleep(min(0.25, self.config.lease_s / 6))
            rec = await self.store.get(research_id) or rec
            if rec.finished:
                break
        return rec

    async def lookup(self, research_id: str) -> Job | ResearchRecord:
        """This process's live job, else the stored record (a running one whose server has stopped
        renewing its lease reads as interrupted: nothing runs it)."""
        job = self.jobs.get(research_id)
        if job is not None:
            return job
        rec = await self.store.get(research_id)
        if rec is None:
            raise UnknownResearch(research_id)
        if rec.status in ("queued", "running") and not rec.leased:
            rec = rec.model_copy(update={"status": "interrupted"})
        return rec


def freeze_heap() -> None:
    """Move every object alive now (the modules, the server, the warm caches) out of the garbage
    collector's reach. A full collection walks every tracked object, and with the research code
    loaded that is most of the heap: under load those walks stopped the event loop for up to 195 ms,
    1.5 s in all over 100 researches, and every research stalled with it. After the freeze they walk
    only what researches allocate (85 ms at most, 0.6 s in all). The objects frozen are the ones
    that live as long as the process anyway. No collection first: it would stop the loop for about
    100 ms to find some 80 unreachable objects."""
    import gc

    gc.freeze()
    log.debug("heap frozen: %d objects left out of garbage collection", gc.get_freeze_count())


def _import_research_modules() -> None:
    import importlib

    for name in ("graph.runner", "tools.providers", "tools.search", "tools.reader", "trafilatura"):
        try:
            importlib.import_module(name)
        except Exception as e:  # a broken optional module shows up on first use, with its error
            log.debug("warm-up: %s not imported: %s", name, e)
    try:
        from tools.reader import warm_extract_pool

        warm_extract_pool()
    except Exception as e:  # the first page then starts the workers, or reports why they cannot run
        log.warning("extraction workers did not start: %s", e)


@functools.cache
def _machine() -> str:
    """This boot of this machine and this pid namespace: where a pid means the same process."""
    import hashlib

    parts = [socket.gethostname()]
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            parts.append(open(path).read().strip() if path.endswith("boot_id") else str(os.stat(path).st_ino))
        except OSError:
            parts.append("?")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:8]


def owner_id() -> str:
    """A server instance's owner id: host:pid:machine:random (readable in logs and error messages)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_machine()}:{uuid.uuid4().hex[:8]}"


def owner_is_dead(owner: str) -> bool:
    """True only when `owner` ran in this machine's pid namespace and its process is gone. Anything
    else (another host or container, a pid reused by a live process) is False: wait for the lease."""
    try:
        _host, pid, machine, _ = owner.rsplit(":", 3)
        pid_n = int(pid)
    except ValueError:
        return False
    if machine != _machine() or pid_n == os.getpid():
        return False
    try:
        os.kill(pid_n, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, someone else's
        return False
    return False


def _owned_elsewhere(rec: ResearchRecord) -> str:
    return (f"research {rec.research_id} is running on another server ({rec.owner}); research_status "
            "follows it from here, and it is resumed here only if that server stops renewing its lease")


def _jsonable(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if isinstance(v, str | int | float | bool | type(None))}


async def open_jobs(config: ServerSettings | None = None, *, prepare: Prepare | None = None,
                    auto_resume: bool = False) -> tuple[ResearchJobs, AsyncExitStack]:
    """Open the store and a started registry; close both with `await stack.aclose()`."""
    config = config or ServerSettings()
    stack = AsyncExitStack()
    store = await stack.enter_async_context(open_store(config.database_url))
    jobs = ResearchJobs(store, config, prepare=prepare)
    stack.push_async_callback(jobs.shutdown)
    await jobs.start(auto_resume=auto_resume)
    return jobs, stack
