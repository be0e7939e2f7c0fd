"""Shared helpers for the benchmarks: the reference instrument's servers, their logs, tables, JSON.

The reference instrument (fakellm.py, fakesearch.py, chain.py) lives beside the project, in
../shared/bench by default. It simulates a world where every LLM call, search and page fetch takes
a fixed time, so what differs between runs (and between this agent and its peers) is only how the
work is orchestrated. Benchmarks start its servers as subprocesses on 127.0.0.1, point the agent at
them through the environment, and read the servers' own logs afterwards: the figures come from
what the servers saw, not from the agent's account of itself.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BENCH_DIR = ROOT.parent / "shared" / "bench"
DEFAULT_EVALDATA_DIR = ROOT.parent / "shared" / "evaldata"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
INSTRUMENT_FILES = ("fakellm.py", "fakesearch.py", "chain.py")


class InstrumentMissing(RuntimeError):
    """The reference instrument is not where we were told to look."""


def find_bench_dir(path: str | Path | None = None) -> Path:
    """The instrument folder, or InstrumentMissing saying where it was looked for and how to fix it."""
    bench = Path(path).expanduser().resolve() if path else DEFAULT_BENCH_DIR
    missing = [f for f in INSTRUMENT_FILES if not (bench / f).is_file()]
    if missing:
        raise InstrumentMissing(
            f"the reference instrument is not in {bench} (missing {', '.join(missing)}); "
            f"pass its folder as --bench DIR")
    return bench


# -- the servers -------------------------------------------------------------------------------

@dataclass
class Instrument:
    """A running fakellm + fakesearch pair and where they log."""

    bench_dir: Path
    llm_port: int
    search_port: int
    llm_log: Path
    search_log: Path
    llm_latency: float
    search_latency: float
    page_latency: float
    sufficient: bool
    nodelay: bool = False
    procs: list[subprocess.Popen] = field(default_factory=list, repr=False)

    @property
    def llm_base_url(self) -> str:
        return f"http://127.0.0.1:{self.llm_port}/v1"

    @property
    def search_url(self) -> str:
        return f"http://127.0.0.1:{self.search_port}"

    def agent_env(self) -> dict[str, str]:
        """Environment that points the real agent path at the instrument: ChatOpenAI at fakellm, the
        SearXNG provider at fakesearch, the reader allowed onto 127.0.0.1, the cache off (a cached
        search would not reach the instrument and would flatter the figures)."""
        return {
            "OPENAI_BASE_URL": self.llm_base_url,
            "OPENAI_API_KEY": "x",
            "DEEP_RESEARCH_MODEL": "fake",
            "SEARXNG_URL": self.search_url,
            "DEEP_RESEARCH_PROVIDERS": "searxng",
            "DEEP_RESEARCH_ALLOW_PRIVATE_URLS": "true",
            "DEEP_RESEARCH_CACHE_ENABLED": "false",
        }

    def llm_calls(self) -> list[dict[str, Any]]:
        return read_jsonl(self.llm_log)

    def search_requests(self) -> list[dict[str, Any]]:
        return read_jsonl(self.search_log)

    def settle(self, quiet_s: float = 0.05, limit_s: float = 2.0) -> None:
        """Wait until both logs stop growing: a server logs a request after sending its response,
        so the client can hold the answer a moment before the line is written."""
        deadline = time.monotonic() + limit_s
        last = None
        while time.monotonic() < deadline:
            size = tuple(p.stat().st_size if p.exists() else 0 for p in (self.llm_log, self.search_log))
            if size == last:
                return
            last = size
            time.sleep(quiet_s)

    def reset_logs(self) -> None:
        """Start both logs afresh (between runs on the same servers)."""
        for p in (self.llm_log, self.search_log):
            p.write_text("")

    def settings(self) -> dict[str, Any]:
        return {"llm_latency_s": self.llm_latency, "search_latency_s": self.search_latency,
                "page_latency_s": self.page_latency, "sufficient": self.sufficient,
                "tcp_nodelay": self.nodelay}


# Runs an instrument script unchanged except that its server sockets set TCP_NODELAY (the stdlib's
# own switch for it). The stdlib server writes a response's headers and body in two sends; without
# TCP_NODELAY the body waits for the client's delayed ACK (40 ms on Linux) on a kept-alive
# connection. Production servers (uvicorn, Go, nginx) set TCP_NODELAY, so this is the instrument
# with a production-like transport; the default remains the instrument exactly as the peers met it.
_NODELAY_LAUNCHER = ("import runpy, socketserver, sys; socketserver.StreamRequestHandler.disable_nagle_algorithm = True; "
                     "script = sys.argv.pop(1); sys.argv[0] = script; runpy.run_path(script, run_name='__main__')")


def _spawn(script: Path, args: Sequence[str], log: Path, nodelay: bool = False) -> tuple[subprocess.Popen, int]:
    launcher = ["-c", _NODELAY_LAUNCHER] if nodelay else []
    proc = subprocess.Popen([sys.executable, *launcher, str(script), "--port", "0", "--log", str(log), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("PORT "):
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"{script.name} did not start (first output {line!r}): {err.strip()[:400]}")
    return proc, int(line.split()[1])


@contextlib.contextmanager
def start_instrument(bench_dir: str | Path | None = None, llm_latency: float = 0.5,
                     search_latency: float = 0.3, page_latency: float = 0.3, sufficient: bool = False,
                     tps: float = 0.0, log_dir: str | Path | None = None,
                     nodelay: bool = False) -> Iterator[Instrument]:
    """Start fakellm and fakesearch on free 127.0.0.1 ports; stop them on exit.

    Yields an Instrument with the ports, base URLs and log paths. `sufficient=False` makes every
    "is it sufficient?" answer no, so research loops run to their round limit. `nodelay=True` gives
    the servers a production-like transport (TCP_NODELAY; see _NODELAY_LAUNCHER).
    """
    bench = find_bench_dir(bench_dir)
    with contextlib.ExitStack() as stack:
        folder = Path(log_dir) if log_dir else Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="drbench-")))
        folder.mkdir(parents=True, exist_ok=True)
        llm_log, search_log = folder / "fakellm.jsonl", folder / "fakesearch.jsonl"
        for p in (llm_log, search_log):
            p.write_text("")
        procs: list[subprocess.Popen] = []
        try:
            llm, llm_port = _spawn(bench / "fakellm.py", ["--latency", str(llm_latency), "--tps", str(tps),
                                                          "--sufficient", str(sufficient).lower()], llm_log,
                                   nodelay)
            procs.append(llm)
            search, search_port = _spawn(bench / "fakesearch.py", ["--latency", str(search_latency),
                                                                   "--page-latency", str(page_latency)],
                                         search_log, nodelay)
            procs.append(search)
            yield Instrument(bench, llm_port, search_port, llm_log, search_log, llm_latency,
                             search_latency, page_latency, sufficient, nodelay, procs)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                for stream in (p.stdout, p.stderr):
                    if stream:
                        stream.close()


@contextlib.contextmanager
def patched_env(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of a block, restoring the old values after."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- reading the logs ----------------------------------------------------------------------------

def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def load_chain(bench_dir: str | Path):
    """The instrument's own chain.analyse(log_path), so our sequential-call figures are computed
    exactly as the peers' were."""
    path = Path(bench_dir) / "chain.py"
    spec = importlib.util.spec_from_file_location("bench_chain", path)
    if spec is None or spec.loader is None:
        raise InstrumentMissing(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.analyse


def critical_path(intervals: list[dict[str, Any]], tolerance: float = 1e-3) -> dict[str, Any]:
    """The longest chain (in seconds) of timed operations that ran strictly one after another.

    `intervals` are log records with start/end (epoch seconds) and a kind, from both servers
    (LLM calls, searches, page fetches). Every operation in the chain started after the previous
    one ended, so no orchestration, however clever, finishes in less than the chain's seconds:
    wall / chain is the framework's overhead over the work that had to be sequential.
    """
    ops = sorted(intervals, key=lambda c: c["end"])
    best: list[tuple[float, int, int]] = []  # (seconds, length, predecessor) of the best chain ending at i
    for i, c in enumerate(ops):
        dur = c["end"] - c["start"]
        cand = (dur, 1, -1)
        for j in range(i):
            if ops[j]["end"] <= c["start"] + tolerance and best[j][0] + dur > cand[0]:
                cand = (best[j][0] + dur, best[j][1] + 1, j)
        best.append(cand)
    if not best:
        return {"seconds": 0.0, "length": 0, "kinds": [], "idle_s": 0.0}
    i = max(range(len(best)), key=lambda k: best[k][0])
    chain = []
    while i >= 0:
        chain.append(ops[i])
        i = best[i][2]
    chain.reverse()
    # gaps between consecutive links: time nothing on the chain was running (framework + client)
    gaps = [b["start"] - a["end"] for a, b in zip(chain, chain[1:])]
    return {"seconds": round(sum(c["end"] - c["start"] for c in chain), 3), "length": len(chain),
            "kinds": [kind_of(c) for c in chain], "idle_s": round(sum(max(0.0, g) for g in gaps), 3),
            "max_gap_ms": round(max(gaps, default=0.0) * 1000, 1)}


def kind_of(record: dict[str, Any]) -> str:
    kind = str(record.get("kind", ""))
    if kind in ("page", "searxng", "tavily"):
        return "page" if kind == "page" else "search"
    return "llm:" + kind.split(":", 1)[-1] if kind.startswith("json_schema:") else "llm:" + kind


# -- output -----------------------------------------------------------------------------------

def print_table(rows: list[dict[str, Any]], columns: list[tuple[str, str]], title: str | None = None,
                file: Any = None) -> None:
    """A plain markdown table (renders in a terminal, a CI log and a README alike)."""
    out = file or sys.stdout
    if title:
        print(f"\n{title}\n", file=out)
    header = [label for _, label in columns]
    cells = [[fmt(r.get(key)) for key, _ in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |", file=out)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", file=out)
    for c in cells:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(c, widths)) + " |", file=out)
    out.flush()


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    if isinstance(v, int) and v >= 10_000:
        return f"{v / 1000:.1f}k"
    return str(v)


def write_json(name: str, payload: dict[str, Any], results_dir: str | Path | None = None) -> Path:
    """Write benchmarks/results/<name>-<timestamp>.json (gitignored) and <name>-latest.json."""
    folder = Path(results_dir) if results_dir else RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    data = json.dumps(payload, indent=2, default=_json_default)
    path = folder / f"{name}-{stamp}.json"
    path.write_text(data)
    (folder / f"{name}-latest.json").write_text(data)
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "model_dump"):
        return o.model_dump()
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def environment() -> dict[str, Any]:
    """What a reader needs to reproduce a figure: machine, Python, key library versions, commit."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    libs = {}
    for name in ("langgraph", "langchain-core", "langchain-openai", "openai", "httpx"):
        try:
            libs[name] = version(name)
        except PackageNotFoundError:
            libs[name] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "commit": commit, "libraries": libs}


# -- our MCP server over HTTP in a subprocess (load benchmark, crash test, server tests) -------------

def descendants(pid: int) -> list[int]:
    """The live descendants of `pid` (children of any of its threads, and theirs), from /proc."""
    out, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def process_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`server.py --transport http` in a subprocess. The port stays the same across restarts, as a
    supervisor would restart it; output is appended to `log` (or dropped when log is None)."""

    def __init__(self, env: dict[str, str], log: Path | None = None, *args: str, port: int | None = None):
        self.env, self.log, self.args = env, log, args
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def start(self, *extra: str, limit_s: float = 30) -> "ServerProcess":
        """Spawn the server and return once /healthz answers; RuntimeError with the log tail if not."""
        import httpx

        sink = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen([sys.executable, str(ROOT / "server.py"), "--transport", "http",
                                          "--port", str(self.port), *self.args, *extra],
                                         cwd=ROOT, env=self.env, stdout=sink, stderr=subprocess.STDOUT)
        finally:
            if self.log:
                sink.close()  # the child holds its own copy of the descriptor
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server.py exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server.py did not answer /healthz within {limit_s:.0f} s:\n{self.tail()}")

    def kill9(self) -> None:
        """A crash, not a stop: no shutdown hook runs."""
        import signal

        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, lines: int = 30) -> str:
        if not self.log or not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
