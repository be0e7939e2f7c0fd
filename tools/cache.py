"""A persistent TTL cache (SQLite) for search responses and read pages.

SQLite in WAL mode lets several processes (an MCP server and a CLI run) share one file. A call runs
on the event loop when SQLite can answer at once: a read or write of one row on a warm file takes tens
of microseconds, far less than a hop to a thread, which under load waits for the GIL and then for
the loop to wake. When another process holds the write lock, the inline connection (no busy timeout)
gives up at once and the call goes to a thread, whose connection waits out the lock there. Each
connection has its own lock, so threads never share a cursor.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from tools.settings import ToolSettings

log = logging.getLogger("deep_research.tools.cache")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    value TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_expiry ON entries(expires_at);
"""


def cache_key(namespace: str, params: dict[str, Any]) -> str:
    """Stable key for a namespace (e.g. "search:tavily") and its parameters."""
    blob = json.dumps(params, sort_keys=True, default=str, separators=(",", ":"))
    return f"{namespace}:{hashlib.sha256(blob.encode()).hexdigest()}"


class _Conn:
    """One SQLite connection to the cache file and the lock that serialises its users."""

    def __init__(self, path: Path, busy_timeout_ms: int):
        self.path, self.busy_timeout_ms = path, busy_timeout_ms
        self.lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def get(self) -> sqlite3.Connection:  # call with self.lock held
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000, check_same_thread=False,
                                   isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    def close(self) -> None:
        with self.lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _locked(e: sqlite3.OperationalError) -> bool:
    return getattr(e, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) \
        or "locked" in str(e)


class Cache:
    """Key/value JSON store with per-entry expiry. Every failure degrades to a cache miss."""

    def __init__(self, path: Path, ttl_s: float = 6 * 3600, *, clock=time.time):
        self.path = Path(path)
        self.ttl_s = ttl_s
        self._clock = clock
        self._inline = _Conn(self.path, busy_timeout_ms=0)  # on the loop: never waits for a lock
        self._patient = _Conn(self.path, busy_timeout_ms=10_000)  # in a thread: waits out other writers

    def _get_sync(self, conn: _Conn, key: str) -> Any | None:
        with conn.lock:
            row = conn.get().execute(
                "SELECT value FROM entries WHERE key = ? AND expires_at > ?", (key, self._clock())
            ).fetchone()
        return json.loads(row[0]) if row else None

    def _set_sync(self, conn: _Conn, key: str, namespace: str, blob: str, ttl_s: float) -> None:
        with conn.lock:
            conn.get().execute(
                "INSERT OR REPLACE INTO entries (key, namespace, value, expires_at) VALUES (?, ?, ?, ?)",
                (key, namespace, blob, self._clock() + ttl_s))

    async def _run(self, fn, *args: Any) -> Any:
        """`fn(conn, *args)` inline when SQLite answers at once, else in a thread that waits for the lock."""
        try:
            return fn(self._inline, *args)
        except sqlite3.OperationalError as e:
            if not _locked(e):
                raise
        return await asyncio.to_thread(fn, self._patient, *args)

    async def get(self, namespace: str, params: dict[str, Any]) -> Any | None:
        """The cached JSON value, or None when absent, expired or unreadable."""
        try:
            return await self._run(self._get_sync, cache_key(namespace, params))
        except (sqlite3.Error, OSError, ValueError) as e:
            log.warning("cache read failed (%s); continuing without it", e)
            return None

    async def set(self, namespace: str, params: dict[str, Any], value: Any, ttl_s: float | None = None) -> None:
        """Store a JSON-serialisable value; a write failure is logged and ignored."""
        ttl = self.ttl_s if ttl_s is None else ttl_s
        if ttl <= 0:
            return
        try:
            blob = json.dumps(value, default=str)
            await self._run(self._set_sync, cache_key(namespace, params), namespace, blob, ttl)
        except (sqlite3.Error, OSError, TypeError, ValueError) as e:
            log.warning("cache write failed (%s); continuing without it", e)

    def _purge_sync(self, conn: _Conn) -> int:
        with conn.lock:
            return conn.get().execute("DELETE FROM entries WHERE expires_at <= ?", (self._clock(),)).rowcount

    def _clear_sync(self, conn: _Conn) -> None:
        with conn.lock:
            conn.get().execute("DELETE FROM entries")

    async def purge_expired(self) -> int:
        """Delete expired entries; returns how many went."""
        return await asyncio.to_thread(self._purge_sync, self._patient)

    async def clear(self) -> None:
        await asyncio.to_thread(self._clear_sync, self._patient)

    def close(self) -> None:
        self._inline.close()
        self._patient.close()


_caches: dict[Path, Cache] = {}
_caches_lock = threading.Lock()


def get_cache(settings: ToolSettings) -> Cache | None:
    """The shared cache for `settings.data_dir`, or None when caching is switched off."""
    if not settings.cache_enabled:
        return None
    path = settings.cache_path.expanduser().resolve()
    with _caches_lock:
        cache = _caches.get(path)
        if cache is None:
            cache = _caches[path] = Cache(path, settings.cache_ttl_s)
        return cache
