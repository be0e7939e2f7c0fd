"""A persistent TTL cache (SQLite) for search responses and read pages.

SQLite in WAL mode lets several processes (an MCP server and a CLI run) share one file; a busy
timeout absorbs their brief write locks. Calls run in a worker thread so the event loop never
waits on disk, and one lock per connection keeps threads from sharing a cursor.
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


class Cache:
    """Key/value JSON store with per-entry expiry. Every failure degrades to a cache miss."""

    def __init__(self, path: Path, ttl_s: float = 6 * 3600, *, clock=time.time):
        self.path = Path(path)
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=10000")
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    def _get_sync(self, key: str) -> Any | None:
        with self._lock:
            row = self._connect().execute(
                "SELECT value FROM entries WHERE key = ? AND expires_at > ?", (key, self._clock())
            ).fetchone()
        return json.loads(row[0]) if row else None

    def _set_sync(self, key: str, namespace: str, value: Any, ttl_s: float) -> None:
        blob = json.dumps(value, default=str)
        with self._lock:
            self._connect().execute(
                "INSERT OR REPLACE INTO entries (key, namespace, value, expires_at) VALUES (?, ?, ?, ?)",
                (key, namespace, blob, self._clock() + ttl_s))

    def _purge_sync(self) -> int:
        with self._lock:
            return self._connect().execute("DELETE FROM entries WHERE expires_at <= ?",
                                           (self._clock(),)).rowcount

    def _clear_sync(self) -> None:
        with self._lock:
            self._connect().execute("DELETE FROM entries")

    async def get(self, namespace: str, params: dict[str, Any]) -> Any | None:
        """The cached JSON value, or None when absent, expired or unreadable."""
        try:
            return await asyncio.to_thread(self._get_sync, cache_key(namespace, params))
        except (sqlite3.Error, OSError, ValueError) as e:
            log.warning("cache read failed (%s); continuing without it", e)
            return None

    async def set(self, namespace: str, params: dict[str, Any], value: Any, ttl_s: float | None = None) -> None:
        """Store a JSON-serialisable value; a write failure is logged and ignored."""
        ttl = self.ttl_s if ttl_s is None else ttl_s
        if ttl <= 0:
            return
        try:
            await asyncio.to_thread(self._set_sync, cache_key(namespace, params), namespace, value, ttl)
        except (sqlite3.Error, OSError, TypeError, ValueError) as e:
            log.warning("cache write failed (%s); continuing without it", e)

    async def purge_expired(self) -> int:
        """Delete expired entries; returns how many went."""
        return await asyncio.to_thread(self._purge_sync)

    async def clear(self) -> None:
        await asyncio.to_thread(self._clear_sync)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


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
