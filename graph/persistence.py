"""Where researches live between calls and restarts: the graph checkpointer and the research records.

Two stores, one location. The LangGraph checkpointer holds each run's step-by-step state (thread id
= research id), so an interrupted run resumes without repeating finished steps. `ResearchStore`
holds one small row per research (question, status, settings, progress, result) so a server can
list, report and resume researches after a restart without loading checkpoints.

SQLite files in the data directory by default; Postgres when DEEP_RESEARCH_DATABASE_URL (or the
`url` argument) is a postgresql:// URL, for servers that run on several machines. Nothing here
imports LangGraph at module import time: the MCP server imports this module on a cold start.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
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
    path.mkdir(parents=True, exist_ok=True)
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
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(data_dir() / CHECKPOINT_FILE)) as saver:
        # WAL lets status reads proceed while a run writes its checkpoints
        await saver.conn.execute("PRAGMA journal_mode=WAL")
        await saver.setup()
        yield saver


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

    @property
    def finished(self) -> bool:
        return self.status not in UNFINISHED


_COLUMNS = ("research_id", "question", "status", "created_at", "updated_at", "settings", "progress",
            "result", "error")
_JSON = ("settings", "progress", "result")


def _row(rec: ResearchRecord) -> tuple:
    d = rec.model_dump()
    return tuple(json.dumps(d[c]) if c in _JSON and d[c] is not None else d[c] for c in _COLUMNS)


def _record(row: Any) -> ResearchRecord:
    d = dict(zip(_COLUMNS, row)) if not isinstance(row, dict) else dict(row)
    for c in _JSON:
        if isinstance(d.get(c), str):
            d[c] = json.loads(d[c])
    d["settings"] = d.get("settings") or {}
    return ResearchRecord.model_validate(d)


class ResearchStore(ABC):
    """Research records that survive restarts. Open with `open_store()`."""

    async def create(self, research_id: str, question: str, settings: dict[str, Any] | None = None,
                     status: RecordStatus = "queued") -> ResearchRecord:
        """Insert a new record (a research id is used once)."""
        rec = ResearchRecord(research_id=research_id, question=question, status=status,
                             settings=settings or {})
        await self._insert(rec)
        return rec

    async def update_progress(self, research_id: str, progress: dict[str, Any],
                              status: RecordStatus | None = None) -> None:
        """Record the latest progress event (and optionally a new status) of an unfinished run."""
        await self._update(research_id, progress=progress, status=status)

    async def set_status(self, research_id: str, status: RecordStatus) -> None:
        await self._update(research_id, status=status)

    async def finish(self, research_id: str, status: RecordStatus, result: dict[str, Any] | None = None,
                     error: str | None = None) -> None:
        """Store the outcome: a ResearchResult dump, or an error message when there is none."""
        await self._update(research_id, status=status, result=result, error=error)

    async def mark_interrupted(self) -> list[str]:
        """Flag every queued or running record as interrupted (after a crash, or at shutdown)."""
        ids = [r.research_id for r in await self.list_unfinished() if r.status != "interrupted"]
        for rid in ids:
            await self._update(rid, status="interrupted")
        return ids

    @abstractmethod
    async def get(self, research_id: str) -> ResearchRecord | None: ...

    @abstractmethod
    async def list_recent(self, limit: int = 20) -> list[ResearchRecord]:
        """Newest first."""

    @abstractmethod
    async def list_unfinished(self) -> list[ResearchRecord]:
        """Queued, running or interrupted records, oldest first."""

    @abstractmethod
    async def _insert(self, rec: ResearchRecord) -> None: ...

    @abstractmethod
    async def _update(self, research_id: str, **fields: Any) -> None: ...

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
    """Records in a SQLite file (WAL), one shared aiosqlite connection."""

    def __init__(self, path: Path | str):
        self.path = str(path)
        self._db: Any = None
        self._lock = asyncio.Lock()  # one writer at a time on the shared connection

    async def open(self) -> "SqliteResearchStore":
        import aiosqlite

        self._db = await aiosqlite.connect(self.path)
        await self._db.execute("PRAGMA journal_mode=WAL")
        await self._db.execute("PRAGMA busy_timeout=5000")
        await self._db.execute(_SCHEMA)
        await self._db.execute(_INDEX)
        await self._db.commit()
        return self

    async def _insert(self, rec: ResearchRecord) -> None:
        async with self._lock:
            await self._db.execute(f"INSERT INTO researches ({', '.join(_COLUMNS)}) VALUES "
                                   f"({', '.join('?' * len(_COLUMNS))})", _row(rec))
            await self._db.commit()

    async def _update(self, research_id: str, **fields: Any) -> None:
        changes = self._changes(fields)
        sets = ", ".join(f"{k} = ?" for k in changes)
        async with self._lock:
            await self._db.execute(f"UPDATE researches SET {sets} WHERE research_id = ?",
                                   (*changes.values(), research_id))
            await self._db.commit()

    async def _select(self, where: str, params: tuple, tail: str = "") -> list[ResearchRecord]:
        async with self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM researches {where} {tail}",
                                    params) as cur:
            return [_record(r) for r in await cur.fetchall()]

    async def get(self, research_id: str) -> ResearchRecord | None:
        rows = await self._select("WHERE research_id = ?", (research_id,))
        return rows[0] if rows else None

    async def list_recent(self, limit: int = 20) -> list[ResearchRecord]:
        return await self._select("", (), f"ORDER BY created_at DESC LIMIT {int(limit)}")

    async def list_unfinished(self) -> list[ResearchRecord]:
        marks = ", ".join("?" * len(UNFINISHED))
        return await self._select(f"WHERE status IN ({marks})", UNFINISHED, "ORDER BY created_at")

    async def aclose(self) -> None:
        if self._db is not None:
            await self._db.close()
            self._db = None


class PostgresResearchStore(ResearchStore):
    """Records in a Postgres table, through a small psycopg connection pool."""

    def __init__(self, url: str):
        self._pool = _pg_pool(url, max_size=4)

    async def open(self) -> "PostgresResearchStore":
        await self._pool.open(wait=True, timeout=10)
        async with self._pool.connection() as conn:
            await conn.execute(_SCHEMA)
            await conn.execute(_INDEX)
        return self

    async def _insert(self, rec: ResearchRecord) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(f"INSERT INTO researches ({', '.join(_COLUMNS)}) VALUES "
                               f"({', '.join(['%s'] * len(_COLUMNS))})", _row(rec))

    async def _update(self, research_id: str, **fields: Any) -> None:
        changes = self._changes(fields)
        sets = ", ".join(f"{k} = %s" for k in changes)
        async with self._pool.connection() as conn:
            await conn.execute(f"UPDATE researches SET {sets} WHERE research_id = %s",
                               (*changes.values(), research_id))

    async def _select(self, where: str, params: tuple, tail: str = "") -> list[ResearchRecord]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM researches {where} {tail}", params)
            return [_record(r) for r in await cur.fetchall()]

    async def get(self, research_id: str) -> ResearchRecord | None:
        rows = await self._select("WHERE research_id = %s", (research_id,))
        return rows[0] if rows else None

    async def list_recent(self, limit: int = 20) -> list[ResearchRecord]:
        return await self._select("", (), f"ORDER BY created_at DESC LIMIT {int(limit)}")

    async def list_unfinished(self) -> list[ResearchRecord]:
        return await self._select("WHERE status = ANY(%s)", (list(UNFINISHED),), "ORDER BY created_at")

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
