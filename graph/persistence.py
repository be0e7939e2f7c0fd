"""Where researches live between calls and restarts: the graph checkpointer and the research records.

Two stores, one location. The LangGraph checkpointer holds each run's step-by-step state (thread id
= research id), so an interrupted run resumes without repeating finished steps. `ResearchStore`
holds one small row per research (question, status, settings, progress, result) so a server can
list, report and resume researches after a restart without loading checkpoints.

SQLite files in the data directory by default; Postgres when DEEP_RESEARCH_DATABASE_URL (or the
`url` argument) is a postgresql:// URL, for servers that run on several machines. Nothing here
imports LangGraph at module import time: the MCP server imports this module on a cold start.

Several servers may share one store. Each unfinished record carries its owner (a server instance)
and a lease the owner keeps renewing; another server takes a research over only once its lease has
expired, by an atomic conditional UPDATE (one winner). Lease times come from the database's clock,
so replicas on different machines need not agree on the time.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

RecordStatus = Literal["queued", "running", "complete", "partial", "failed", "cancelled", "interrupted"]
UNFINISHED: tuple[str, ...] = ("queued", "running", "interrupted")
CHECKPOINT_FILE = "checkpoints.sqlite3"
RECORDS_FILE = "researches.sqlite3"


def data_dir() -> Path:
    """The data directory (DEEP_RESEARCH_DATA_DIR, else the platform default), created if missing."""
    from tools.settings import get_tool_settings

    path = Path(get_tool_settings().data_dir).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        from graph.settings import SettingsError

        raise SettingsError(f"DEEP_RESEARCH_DATA_DIR: cannot use {path} as the data folder ({e.strerror}); "
                            "point it at a folder this user can write") from None
    return path


def database_url(url: str | None = None) -> str | None:
    """The Postgres URL to use, or None for the SQLite files."""
    url = url or os.environ.get("DEEP_RESEARCH_DATABASE_URL") or None
    if url and not is_postgres(url):
        raise ValueError("DEEP_RESEARCH_DATABASE_URL: only postgresql:// URLs are supported; "
                         "leave it unset to use SQLite files in the data directory")
    return url


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def _pg_pool(url: str, max_size: int = 8):
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    # autocommit + no prepared statements: what AsyncPostgresSaver expects, and safe behind pgbouncer
    return AsyncConnectionPool(url, min_size=1, max_size=max_size, open=False,
                               kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})


# WAL lets status reads proceed while runs write checkpoints. synchronous=NORMAL commits without an
# fsync (the WAL is synced at its checkpoints): a killed or crashed process loses nothing, a power cut
# may lose the last steps, which a resume then runs again. Postgres is the choice for power-loss
# durability.
_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA busy_timeout=5000")


@functools.cache
def inline_sqlite_saver() -> type:
    """LangGraph's SqliteSaver with its async methods run on the event loop itself.

    A checkpoint write is small (serialise a few KB to tens of KB, insert, commit without fsync under
    WAL + synchronous=NORMAL): well under a millisecond. Handing it to a thread costs more than doing
    it: the thread needs the GIL from a busy loop and wakes the loop when done, and with durability
    "sync" each step waits for that round trip. Twenty researches in one process, per step between
    nodes: AsyncSqliteSaver (aiosqlite) 83-108 ms, one dedicated thread 54-81 ms, inline 27 ms, an
    in-memory saver 16-22 ms. Same tables as AsyncSqliteSaver, so existing files keep working. Built
    on first use: LangGraph is imported with the first research, not with the server.
    """
    from langgraph.checkpoint.sqlite import SqliteSaver

    class InlineSqliteSaver(SqliteSaver):
        async def aget_tuple(self, config):
            return self.get_tuple(config)

        async def alist(self, config, *, filter=None, before=None, limit=None):
            for item in self.list(config, filter=filter, before=before, limit=limit):
                yield item

        async def aput(self, config, checkpoint, metadata, new_versions):
            return self.put(config, checkpoint, metadata, new_versions)

        async def aput_writes(self, config, writes, task_id, task_path=""):
            return self.put_writes(config, writes, task_id, task_path)

        async def adelete_thread(self, thread_id):
            return self.delete_thread(thread_id)

        async def aget_delta_channel_history(self, *, config, channels):
            return self.get_delta_channel_history(config=config, channels=channels)

    return InlineSqliteSaver


@asynccontextmanager
async def open_checkpointer(url: str | None = None) -> AsyncIterator[Any]:
    """A LangGraph async checkpointer: SQLite in the data directory, or Postgres for a postgres URL."""
    url = database_url(url)
    if url:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with _pg_pool(url) as pool:
            saver = AsyncPostgresSaver(conn=pool)
            await saver.setup()
            yield saver
        return
    import sqlite3

    conn = sqlite3.connect(str(data_dir() / CHECKPOINT_FILE), check_same_thread=False)
    try:
        for pragma in _PRAGMAS:
            conn.execute(pragma)
        saver = inline_sqlite_saver()(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()


# -- research records -----------------------------------------------------------------------------

class ResearchRecord(BaseModel):
    """One research as the server remembers it."""

    research_id: str
    question: str
    status: RecordStatus = "queued"
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    settings: dict[str, Any] = Field(default_factory=dict, description="The call's setting overrides.")
    progress: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    owner: str | None = Field(None, description="The server instance running it (while it runs).")
    lease_expires_at: float | None = Field(None, description="Database time; the owner renews it.")
    cancel_requested_at: float | None = Field(None, description="Set when another server asked to cancel.")
    lease_left_s: float | None = Field(None, description="Seconds of lease left when read (negative: expired).")

    @property
    def finished(self) -> bool:
        return self.status not in UNFINISHED

    @property
    def leased(self) -> bool:
        """True while an owner holds a live lease on this research (it is running somewhere)."""
        return self.owner is not None and self.lease_left_s is not None and self.lease_left_s > 0


_COLUMNS = ("research_id", "question", "status", "created_at", "updated_at", "settings", "progress",
            "result", "error", "owner", "lease_expires_at", "cancel_requested_at")
_JSON = ("settings", "progress", "result")
# columns added after the first release, with their types: migrated in place when missing
_ADDED = {"owner": "TEXT", "lease_expires_at": "DOUBLE PRECISION", "cancel_requested_at": "DOUBLE PRECISION"}
_LIVE = ("queued", "running")  # statuses an owner holds a lease on
_RESUMABLE = ("queued", "running", "interrupted", "failed")


def _row(rec: ResearchRecord) -> tuple:
    d = rec.model_dump()
    return tuple(json.dumps(d[c]) if c in _JSON and d[c] is not None else d[c] for c in _COLUMNS)


def _record(row: Any) -> ResearchRecord:
    d = dict(zip((*_COLUMNS, "lease_left_s"), row)) if not isinstance(row, dict) else dict(row)
    for c in _JSON:
        if isinstance(d.get(c), str):
            d[c] = json.loads(d[c])
    d["settings"] = d.get("settings") or {}
    return ResearchRecord.model_validate(d)


class ResearchStore(ABC):
    """Research records that survive restarts, shared safely by several servers. Open with `open_store()`.

    Writes that pass `owner` only apply while that owner still holds the research: a server that
    lost its lease (it stalled and another server took over) cannot overwrite the new owner's work.
    """

    _mark = "?"  # the driver's parameter placeholder
    _now = ""  # SQL for the database's clock in epoch seconds

    async def create(self, research_id: str, question: str, settings: dict[str, Any] | None = None,
                     status: RecordStatus = "queued", *, owner: str | None = None,
                     lease_s: float = 0.0) -> ResearchRecord:
        """Insert a new record (a research id is used once), leased to `owner` when given."""
        rec = ResearchRecord(research_id=research_id, question=question, status=status,
                             settings=settings or {})
        await self._insert(rec)
        if owner is not None:
            await self._exec(f"UPDATE researches SET owner = {self._mark}, lease_expires_at = {self._now} + "
                             f"{self._mark} WHERE research_id = {self._mark}", (owner, lease_s, research_id))
        return rec

    async def update_progress(self, research_id: str, progress: dict[str, Any],
                              status: RecordStatus | None = None, *, owner: str | None = None) -> bool:
        """Record the latest progress event (and optionally a new status) of an unfinished run."""
        return await self._update(research_id, owner, progress=progress, status=status)

    async def set_status(self, research_id: str, status: RecordStatus, *, owner: str | None = None) -> bool:
        return await self._update(research_id, owner, status=status)

    async def finish(self, research_id: str, status: RecordStatus, result: dict[str, Any] | None = None,
                     error: str | None = None, *, owner: str | None = None) -> bool:
        """Store the outcome (a ResearchResult dump, or an error message when there is none) and
        release the lease. False when `owner` no longer holds the research."""
        return await self._update(research_id, owner, status=status, result=result, error=error,
                                  lease_expires_at=0.0)

    async def mark_interrupted(self) -> list[str]:
        """Flag queued or running records whose owner is gone (lease expired, or none: written by a
        server without leases) as interrupted. Researches live on other servers are left alone."""
        m = self._mark
        expired = await self._select(f"WHERE status IN ({', '.join([m] * len(_LIVE))}) AND "
                                     f"{self._expired}", _LIVE, "ORDER BY created_at")
        ids = []
        for rec in expired:  # each row re-checked under the write: an owner may have renewed meanwhile
            if await self._exec(f"UPDATE researches SET status = 'interrupted', updated_at = {m} "
                                f"WHERE research_id = {m} AND status IN ('queued', 'running') AND "
                                f"{self._expired}", (time.time(), rec.research_id)):
                ids.append(rec.research_id)
        return ids

    async def claim(self, research_id: str, owner: str, lease_s: float) -> bool:
        """Take a research over to run it: atomically, and only when nobody holds a live lease on it
        (or `owner` already does). Sets it queued with a fresh lease. True for the one winner."""
        m = self._mark
        return await self._exec(
            f"UPDATE researches SET owner = {m}, lease_expires_at = {self._now} + {m}, status = 'queued', "
            f"cancel_requested_at = NULL, error = NULL, updated_at = {m} WHERE research_id = {m} AND "
            f"status IN ({', '.join([m] * len(_RESUMABLE))}) AND (owner = {m} OR {self._expired})",
            (owner, lease_s, time.time(), research_id, *_RESUMABLE, owner))

    async def renew(self, research_id: str, owner: str, lease_s: float,
                    progress: dict[str, Any] | None = None) -> bool:
        """Extend `owner`'s lease (and store its latest progress). False when it no longer owns it."""
        m = self._mark
        sets, params = f"lease_expires_at = {self._now} + {m}, updated_at = {m}", [lease_s, time.time()]
        if progress is not None:
            sets += f", progress = {m}"
            params.append(json.dumps(progress))
        return await self._exec(f"UPDATE researches SET {sets} WHERE research_id = {m} AND owner = {m} AND "
                                f"status IN ('queued', 'running')", (*params, research_id, owner))

    async def release(self, owner: str) -> list[str]:
        """At a clean shutdown: mark what `owner` still holds interrupted, with its lease expired,
        so another server can resume it at once."""
        m = self._mark
        held = await self._select(f"WHERE owner = {m} AND status IN ('queued', 'running')", (owner,))
        await self._exec(f"UPDATE researches SET status = 'interrupted', lease_expires_at = 0, updated_at = {m} "
                         f"WHERE owner = {m} AND status IN ('queued', 'running')", (time.time(), owner))
        await self._exec(f"UPDATE researches SET lease_expires_at = 0 WHERE owner = {m} AND "
                         f"status = 'interrupted'", (owner,))
        return [r.research_id for r in held]

    async def expire(self, research_id: str, owner: str) -> bool:
        """End `owner`'s lease now (its process is known to be dead)."""
        m = self._mark
        return await self._exec(f"UPDATE researches SET lease_expires_at = 0 WHERE research_id = {m} AND "
                                f"owner = {m}", (research_id, owner))

    async def request_cancel(self, research_id: str) -> bool:
        """Ask the owner of a running research to cancel it (it checks at its next lease renewal)."""
        m = self._mark
        return await self._exec(f"UPDATE researches SET cancel_requested_at = {self._now} WHERE "
                                f"research_id = {m} AND status IN ('queued', 'running')", (research_id,))

    async def cancel_requests(self, owner: str) -> list[str]:
        """Ids of `owner`'s running researches that another server asked to cancel."""
        m = self._mark
        rows = await self._select(f"WHERE owner = {m} AND status IN ('queued', 'running') AND "
                                  "cancel_requested_at IS NOT NULL", (owner,))
        return [r.research_id for r in rows]

    async def get(self, research_id: str) -> ResearchRecord | None:
        rows = await self._select(f"WHERE research_id = {self._mark}", (research_id,))
        return rows[0] if rows else None

    async def list_recent(self, limit: int = 20) -> list[ResearchRecord]:
        """Newest first."""
        return await self._select("", (), f"ORDER BY created_at DESC LIMIT {int(limit)}")

    async def list_unfinished(self) -> list[ResearchRecord]:
        """Queued, running or interrupted records, oldest first."""
        marks = ", ".join([self._mark] * len(UNFINISHED))
        return await self._select(f"WHERE status IN ({marks})", UNFINISHED, "ORDER BY created_at")

    async def list_orphaned(self) -> list[ResearchRecord]:
        """Unfinished records nobody holds a live lease on: what auto-resume may claim, oldest first."""
        marks = ", ".join([self._mark] * len(UNFINISHED))
        return await self._select(f"WHERE status IN ({marks}) AND {self._expired}", UNFINISHED,
                                  "ORDER BY created_at")

    @property
    def _expired(self) -> str:
        return f"(owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at < {self._now})"

    @property
    def _columns(self) -> str:
        return f"{', '.join(_COLUMNS)}, lease_expires_at - {self._now} AS lease_left_s"

    async def _insert(self, rec: ResearchRecord) -> None:
        await self._exec(f"INSERT INTO researches ({', '.join(_COLUMNS)}) VALUES "
                         f"({', '.join([self._mark] * len(_COLUMNS))})", _row(rec))

    async def _update(self, research_id: str, owner: str | None = None, **fields: Any) -> bool:
        changes = self._changes(fields)
        m = self._mark
        sets = ", ".join(f"{k} = {m}" for k in changes)
        fence, params = ("", ()) if owner is None else (f" AND owner = {m}", (owner,))
        return await self._exec(f"UPDATE researches SET {sets} WHERE research_id = {m}{fence}",
                                (*changes.values(), research_id, *params))

    @abstractmethod
    async def _exec(self, sql: str, params: tuple) -> bool:
        """Run one write; True when it changed a row."""

    @abstractmethod
    async def _select(self, where: str, params: tuple, tail: str = "") -> list[ResearchRecord]: ...

    @abstractmethod
    async def aclose(self) -> None: ...

    @staticmethod
    def _changes(fields: dict[str, Any]) -> dict[str, Any]:
        out = {k: (json.dumps(v) if k in _JSON and v is not None else v)
               for k, v in fields.items() if v is not None}
        out["updated_at"] = time.time()
        return out


_SCHEMA = """
CREATE TABLE IF NOT EXISTS researches (
    research_id TEXT PRIMARY KEY,
    question TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    settings TEXT,
    progress TEXT,
    result TEXT,
    error TEXT
)"""
_INDEX = "CREATE INDEX IF NOT EXISTS researches_created ON researches (created_at)"


class SqliteResearchStore(ResearchStore):
    """Records in a SQLite file (WAL) on one connection, used from one thread of its own: each
    operation is a single hop off the event loop, where waiting for another process's write lock
    (busy_timeout) cannot stall it. Several server
    processes on one machine may share the file: SQLite serialises their writes."""

    _mark = "?"
    _now = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(self, path: Path | str):
        self.path = str(path)
        self._db: Any = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="research-records")

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def open(self) -> "SqliteResearchStore":
        await self._run(self._open)
        return self

    def _open(self) -> None:
        import sqlite3

        self._db = db = sqlite3.connect(self.path, check_same_thread=False)
        for pragma in _PRAGMAS:
            db.execute(pragma)
        db.execute(_SCHEMA)
        db.execute(_INDEX)
        have = {row[1] for row in db.execute("PRAGMA table_info(researches)")}
        for name, kind in _ADDED.items():
            if name not in have:
                try:
                    db.execute(f"ALTER TABLE researches ADD COLUMN {name} {kind}")
                except sqlite3.OperationalError as e:  # another process added it first
                    if "duplicate column" not in str(e):
                        raise
        db.commit()

    async def _exec(self, sql: str, params: tuple) -> bool:
        def write() -> bool:
            cur = self._db.execute(sql, params)
            self._db.commit()
            return cur.rowcount > 0

        return await self._run(write)

    async def _select(self, where: str, params: tuple, tail: str = "") -> list[ResearchRecord]:
        def read() -> list[ResearchRecord]:
            rows = self._db.execute(f"SELECT {self._columns} FROM researches {where} {tail}", params).fetchall()
            return [_record(r) for r in rows]

        return await self._run(read)

    async def aclose(self) -> None:
        if self._db is not None:
            await self._run(self._db.close)
            self._db = None
        self._thread.shutdown(wait=True)


class PostgresResearchStore(ResearchStore):
    """Records in a Postgres table, through a small psycopg connection pool."""

    _mark = "%s"
    _now = "extract(epoch from clock_timestamp())::double precision"

    def __init__(self, url: str):
        self._pool = _pg_pool(url, max_size=4)

    async def open(self) -> "PostgresResearchStore":
        await self._pool.open(wait=True, timeout=10)
        async with self._pool.connection() as conn:
            await conn.execute(_SCHEMA)
            await conn.execute(_INDEX)
            cur = await conn.execute("SELECT column_name FROM information_schema.columns WHERE "
                                     "table_name = 'researches' AND table_schema = current_schema()")
            have = {row["column_name"] for row in await cur.fetchall()}
            for name, kind in _ADDED.items():  # ALTER only when missing: it locks the table
                if name not in have:
                    await conn.execute(f"ALTER TABLE researches ADD COLUMN IF NOT EXISTS {name} {kind}")
        return self

    async def _exec(self, sql: str, params: tuple) -> bool:
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql, params)
            return cur.rowcount > 0

    async def _select(self, where: str, params: tuple, tail: str = "") -> list[ResearchRecord]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(f"SELECT {self._columns} FROM researches {where} {tail}", params)
            return [_record(r) for r in await cur.fetchall()]

    async def aclose(self) -> None:
        await self._pool.close()


@asynccontextmanager
async def open_store(url: str | None = None, path: Path | str | None = None) -> AsyncIterator[ResearchStore]:
    """The research records: Postgres for a postgres URL, else a SQLite file (default: data dir)."""
    url = database_url(url)
    store: ResearchStore
    if url:
        store = await PostgresResearchStore(url).open()
    else:
        store = await SqliteResearchStore(path or data_dir() / RECORDS_FILE).open()
    try:
        yield store
    finally:
        await store.aclose()
