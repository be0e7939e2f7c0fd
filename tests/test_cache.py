"""The SQLite TTL cache: real files, expiry, concurrency within a process and across processes."""

import asyncio
import sys

from tools.cache import Cache, cache_key, get_cache
from tools.settings import ToolSettings


def test_key_is_stable_and_order_free():
    assert cache_key("search:x", {"a": 1, "b": [1, 2]}) == cache_key("search:x", {"b": [1, 2], "a": 1})
    assert cache_key("search:x", {"a": 1}) != cache_key("search:y", {"a": 1})


async def test_set_get_and_expiry(tmp_path):
    now = [1000.0]
    cache = Cache(tmp_path / "c.sqlite3", ttl_s=60, clock=lambda: now[0])
    assert await cache.get("ns", {"q": 1}) is None
    await cache.set("ns", {"q": 1}, {"results": [1, 2]})
    assert await cache.get("ns", {"q": 1}) == {"results": [1, 2]}
    now[0] += 61
    assert await cache.get("ns", {"q": 1}) is None
    assert await cache.purge_expired() == 1


async def test_persists_across_instances(tmp_path):
    path = tmp_path / "c.sqlite3"
    a = Cache(path)
    await a.set("ns", {"k": "v"}, [1])
    a.close()
    assert await Cache(path).get("ns", {"k": "v"}) == [1]


async def test_concurrent_writers_in_one_process(tmp_path):
    cache = Cache(tmp_path / "c.sqlite3")
    await asyncio.gather(*(cache.set("ns", {"i": i}, i) for i in range(100)))
    values = await asyncio.gather(*(cache.get("ns", {"i": i}) for i in range(100)))
    assert values == list(range(100))


WRITER = """
import asyncio, sys
from tools.cache import Cache
async def main():
    c = Cache(sys.argv[1])
    for i in range(50):
        await c.set("ns", {"proc": sys.argv[2], "i": i}, i)
asyncio.run(main())
"""


async def test_concurrent_processes_share_the_file(tmp_path):
    path = tmp_path / "shared.sqlite3"
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", WRITER, str(path), str(p)) for p in range(3)]
    assert [await p.wait() for p in procs] == [0, 0, 0]
    cache = Cache(path)
    for p in range(3):
        assert await cache.get("ns", {"proc": str(p), "i": 49}) == 49


async def test_switch_off_and_shared_instance(tmp_path):
    assert get_cache(ToolSettings(cache_enabled=False, data_dir=tmp_path)) is None
    on = ToolSettings(data_dir=tmp_path)
    assert get_cache(on) is get_cache(on)
    assert get_cache(on).path == tmp_path.resolve() / "cache.sqlite3"


async def test_unreadable_file_degrades_to_a_miss(tmp_path):
    path = tmp_path / "c.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    cache = Cache(path)
    assert await cache.get("ns", {"a": 1}) is None
    await cache.set("ns", {"a": 1}, 1)  # logged, not raised


async def test_a_write_lock_held_by_another_process_sends_the_call_to_a_thread(tmp_path):
    """Inline calls never wait for a lock: while another connection holds the write lock the loop
    keeps running, the write lands once the lock is released, and reads are answered throughout."""
    import sqlite3

    path = tmp_path / "c.sqlite3"
    cache = Cache(path)
    await cache.set("ns", {"k": "before"}, 1)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # what a writer in another process holds
    try:
        write = asyncio.ensure_future(cache.set("ns", {"k": "during"}, 2))
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for _ in range(20):  # the loop is free while the write waits in its thread
            await asyncio.sleep(0.01)
        assert not write.done()
        assert loop.time() - t0 < 5  # not stalled by a busy wait on the loop (the patient one waits 10 s)
        assert await cache.get("ns", {"k": "before"}) == 1  # WAL readers are not blocked by a writer
    finally:
        other.execute("COMMIT")
        other.close()
    await asyncio.wait_for(write, 5)
    assert await cache.get("ns", {"k": "during"}) == 2
