"""Server load: many concurrent deep_research calls over Streamable HTTP against the instrument.

The real MCP server (`server.py --transport http`, its own process, SQLite checkpoints) serves N
concurrent MCP clients, each calling deep_research and following its progress, while every LLM
call, search and page fetch takes a fixed time (fakellm, fakesearch). Printed:

    completed / failed      every call must end with a result; admission control may queue, not drop
    latency p50 / p95 s     client-observed: call start to final result (queueing included)
    throughput /min         completed researches per minute of the load phase
    peak running            researches running at once, from their server-reported run windows;
                            must stay within the server's cap (admission control holding)
    RSS                     the server's VmRSS after warm-up, its VmHWM after the load, and the growth
                            per running research (target <= 5 MB)
    framework ms/step       per research: the time in which none of its steps was running (the
                            server measures it: stats.framework_ms) / the super-steps on its critical
                            path, p50 and p95 (target <= 5 ms)
    overhead ms/step        the upper bound: (its run time - the injected latency on its critical
                            path) / the same steps; it also holds the agent's own work in its steps

framework_ms is what LangGraph and the server cost between a research's steps: applying writes,
choosing the next tasks, saving the checkpoint before the next step starts, and waiting for a busy
event loop to get to any of it. Work inside steps (page extraction, model and search clients) is not
in it. Admission control (a hard cap and a CPU gate, graph/cpu_gate.py) decides how many researches
share the loop; the rest wait queued, which the client-observed latency includes.

How the overhead bound is estimated: the critical path of one research is fixed by the graph's shape,
(rounds + 1) sequential LLM calls (plan, one extract/reflect step per round but the last, the report) plus a search
and a page read per round; the benchmark checks that model against the instrument's logs on a lone
warm run. The super-steps on that path are counted from the server's own checkpoints (one row per
super-step; the sub-queries of a round run side by side in one). What is left after subtracting
the injected latency is everything the agent itself spent: LangGraph scheduling and checkpointing,
HTTP clients, JSON, page extraction, passage ranking, MCP progress relays, and waiting for a CPU
shared with 100 researches, the client and the fake servers: an upper bound on LangGraph's cost.

usage:
    uv run python benchmarks/load.py                                  # 100 calls, 1 s / 0.3 s / 0.2 s
    uv run python benchmarks/load.py --researches 100 --max-running 100 --queue-size 0
    uv run python benchmarks/load.py --short                          # CI: 12 calls, quick depth, fast fakes
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sqlite3
import sys
import tempfile
import uuid
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import (InstrumentMissing, ServerProcess, critical_path, descendants, environment,
                               find_bench_dir, print_table, start_instrument, write_json)

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [
    "Do heat pumps work in cold climates, and what do they cost to run?",
    "How do home battery systems age over ten years of daily cycling?",
    "What limits the efficiency of perovskite solar cells outdoors?",
    "How effective are congestion charges at reducing city traffic?",
    "What are the health effects of microplastics in drinking water?",
]
FULL = {"researches": 100, "concurrency": 100, "depth": "standard", "llm": 1.0, "search": 0.3, "page": 0.2,
        "max_running": 50, "queue_size": 100}
SHORT = {"researches": 12, "concurrency": 12, "depth": "quick", "llm": 0.2, "search": 0.05, "page": 0.05,
         "max_running": 6, "queue_size": 12}
MB = 1024 * 1024


# -- the server under test -------------------------------------------------------------------------

class LoadServer(ServerProcess):
    """The shared server subprocess, plus the /proc readings this benchmark reports."""

    def tree(self) -> list[tuple[int, bool]]:
        """(pid, is_server) for the server and its descendants: its workers when it runs several
        (--workers), and the page-extraction processes (is_server False)."""
        out = []
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                out.append((pid, b"multiprocessing" not in Path(f"/proc/{pid}/cmdline").read_bytes()))
            except OSError:
                continue
        return out

    def cpu_s(self) -> float:
        """User + system CPU seconds the server processes have used so far, from /proc/<pid>/stat
        (a supervisor's workers included, page-extraction processes not)."""
        total = 0.0
        for pid, is_server in self.tree():
            if not is_server:
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def helpers_rss(self) -> int:
        """RSS in bytes of the page-extraction processes (and their forkservers)."""
        return sum(self._status(pid).get("VmRSS", 0) for pid, is_server in self.tree() if not is_server)

    @staticmethod
    def _status(pid: int) -> dict[str, int]:
        out = {}
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in ("VmRSS", "VmHWM"):
                        out[key] = int(value.split()[0]) * 1024
        except OSError:
            pass
        return out

    def memory(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak RSS) in bytes, summed over the server processes (no psutil needed)."""
        out = {"VmRSS": 0, "VmHWM": 0}
        for pid, is_server in self.tree():
            if is_server:
                for key, value in self._status(pid).items():
                    out[key] += value
        return out


class Sampler(threading.Thread):
    """Samples the server's RSS and /healthz's count of unfinished researches until stopped."""

    def __init__(self, server: LoadServer, every_s: float = 0.1):
        super().__init__(daemon=True)
        self.server, self.every_s = server, every_s
        self.peak_rss = 0
        self.peak_unfinished = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=2) as http:
            while not self.stopped.is_set():
                try:
                    self.peak_rss = max(self.peak_rss, self.server.memory()["VmRSS"])
                    running = http.get(f"{self.server.url}/healthz").json().get("running", 0)
                    self.peak_unfinished = max(self.peak_unfinished, running)
                except (OSError, httpx.HTTPError, ValueError, KeyError):
                    pass
                self.stopped.wait(self.every_s)


# -- the clients -----------------------------------------------------------------------------------

@dataclass
class Call:
    index: int
    question: str
    status: str = "not started"
    research_id: str | None = None
    latency_s: float | None = None
    run_s: float | None = None  # the server's own duration: graph start to result
    framework_ms: float | None = None  # the server's measure of time between steps
    rounds: int = 0
    llm_calls: int = 0
    searches: int = 0
    progress_events: int = 0
    error: str | None = None


async def one_research(url: str, call: Call, depth: str, limit_s: float) -> None:
    """deep_research as a client does it: wait with progress; if the server's wait limit answers
    'running' (or 'queued'), collect the result with research_status."""
    from mcp import Client

    async def on_progress(*_: Any) -> None:
        call.progress_events += 1

    t0 = time.monotonic()
    try:
        async with asyncio.timeout(limit_s), Client(f"{url}/mcp") as client:
            res = await client.call_tool("deep_research", {"question": call.question, "depth": depth},
                                         progress_callback=on_progress)
            out = res.structured_content or {}
            while not res.is_error and out.get("status") in ("queued", "running"):
                res = await client.call_tool("research_status", {"research_id": out["research_id"], "wait_s": 50},
                                             progress_callback=on_progress)
                out = res.structured_content or {}
        if res.is_error:
            call.status, call.error = "error", " ".join(getattr(c, "text", "") for c in res.content)[:300]
            return
    except TimeoutError:
        call.status, call.error = "timeout", f"no result within {limit_s:.0f} s"
        return
    except Exception as e:  # a transport failure is a failed call, counted and shown, not a crash
        call.status, call.error = "error", f"{type(e).__name__}: {e}"[:300]
        return
    stats = out.get("stats") or {}
    call.status, call.research_id = out.get("status", "?"), out.get("research_id")
    call.latency_s = round(time.monotonic() - t0, 3)
    call.run_s = (stats.get("duration_ms") or 0) / 1000
    call.framework_ms = stats.get("framework_ms")
    call.rounds, call.llm_calls, call.searches = stats.get("rounds", 0), stats.get("llm_calls", 0), stats.get("searches", 0)


async def load_phase(url: str, calls: list[Call], concurrency: int, depth: str, limit_s: float) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def bounded(call: Call) -> None:
        async with gate:
            await one_research(url, call, depth, limit_s)

    t0 = time.monotonic()
    await asyncio.gather(*(bounded(c) for c in calls))
    return time.monotonic() - t0


# -- analysis --------------------------------------------------------------------------------------

def critical_injected_s(rounds: int, llm: float, search: float, page: float) -> float:
    """Injected latency on one research's critical path: plan, then per round a search and the page
    reads (concurrent), an extract/reflect step after every round but the last (the writer reads the
    last round's passages itself), then the report."""
    return (rounds + 1) * llm + rounds * (search + page)


@dataclass
class Trace:
    """What the server's checkpoints say about one research."""

    steps: int = 0  # super-steps of the research graph
    start: float = 0.0  # epoch seconds of its first and last checkpoint: when it held a slot
    end: float = 0.0


def checkpoint_time(checkpoint_id: str) -> float:
    """Epoch seconds from a LangGraph checkpoint id (uuid6: 100 ns ticks since 1582, high bits first)."""
    i = uuid.UUID(checkpoint_id).int
    ticks = ((i >> 80) << 12) | ((i >> 64) & 0x0FFF)
    return (ticks - 0x01B21DD213814000) / 1e7


def read_traces(checkpoints_db: Path, research_ids: list[str]) -> dict[str, Trace]:
    """Per research (thread id): step count and run window, from the server's SQLite checkpoints,
    where every super-step leaves one row."""
    wanted = set(research_ids)
    traces: dict[str, Trace] = {}
    con = sqlite3.connect(f"file:{checkpoints_db}?mode=ro", uri=True)
    try:
        for thread, cid in con.execute("SELECT thread_id, checkpoint_id FROM checkpoints"):
            if thread not in wanted:
                continue
            t = traces.setdefault(thread, Trace(start=math.inf, end=0.0))
            at = checkpoint_time(cid)
            t.steps += 1
            t.start, t.end = min(t.start, at), max(t.end, at)
    finally:
        con.close()
    return traces


def peak_overlap(windows: list[tuple[float, float]]) -> int:
    """Most windows open at one instant (an end at t closes before a start at t opens)."""
    events = sorted([(s, 1) for s, _ in windows] + [(e, -1) for _, e in windows], key=lambda x: (x[0], x[1]))
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


# -- the benchmark ---------------------------------------------------------------------------------

async def run(opts: argparse.Namespace) -> dict[str, Any]:
    bench = find_bench_dir(opts.bench)
    with tempfile.TemporaryDirectory(prefix="drload-") as tmp, start_instrument(
            bench, llm_latency=opts.llm_latency, search_latency=opts.search_latency,
            page_latency=opts.page_latency, sufficient=False, nodelay=opts.nodelay) as inst:
        folder = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEEP_RESEARCH_")}
        env.update(inst.agent_env())
        env.update({"DEEP_RESEARCH_DATA_DIR": str(folder / "data"),
                    "DEEP_RESEARCH_MAX_CONCURRENT_RESEARCHES": str(opts.max_running),
                    "DEEP_RESEARCH_QUEUE_SIZE": str(opts.queue_size),
                    **({"DEEP_RESEARCH_CPU_TARGET": str(opts.cpu_target)} if opts.cpu_target is not None else {}),
                    **({"DEEP_RESEARCH_EXTRACT_PROCESSES": str(opts.extract_processes)}
                       if opts.extract_processes is not None else {}),
                    "DEEP_RESEARCH_RATE_LIMIT_CALLS": "0",  # one client address sends every call here
                    # the per-provider pace protects real vendors; the fake engine needs none
                    "DEEP_RESEARCH_RATE_LIMIT_PER_S": str(opts.search_rate),
                    "DEEP_RESEARCH_LOG_LEVEL": "WARNING"})
        flags = ["--stateless"] if opts.stateless or opts.workers > 1 else []
        if opts.workers > 1:
            flags += ["--workers", str(opts.workers)]
        server = LoadServer(env, folder / "server.log", *flags)
        try:
            server.start(limit_s=60)
            # warm-up: imports, connection pools and the first structured-output probe stay out of the figures
            # several at once, so each worker (new connections spread over them) gets one
            warm = [Call(-1, f"{QUESTIONS[0]} (warm-up {i})") for i in range(2 * opts.workers - 1)]
            await asyncio.gather(*(one_research(server.url, w, opts.depth, 120) for w in warm))
            inst.reset_logs()
            lone = Call(-2, QUESTIONS[1] + " (alone)")
            await one_research(server.url, lone, opts.depth, 120)
            if lone.status != "complete":
                raise RuntimeError(f"a lone research did not complete ({lone.status}: {lone.error}):\n{server.tail()}")
            chain = critical_path(inst.llm_calls() + inst.search_requests())
            baseline = server.memory()
            cpu0 = server.cpu_s()

            calls = [Call(i, f"{QUESTIONS[i % len(QUESTIONS)]} (load {i})") for i in range(opts.researches)]
            sampler = Sampler(server)
            sampler.start()
            wall = await load_phase(server.url, calls, opts.concurrency, opts.depth, opts.time_limit)
            sampler.stopped.set()
            sampler.join()
            after = server.memory()
            helpers = server.helpers_rss()
            cpu = server.cpu_s() - cpu0
            traces = read_traces(folder / "data" / "checkpoints.sqlite3",
                                 [c.research_id for c in calls + [lone] if c.research_id])
        finally:
            server.stop()
        llm_total, search_log = len(inst.llm_calls()), inst.search_requests()
    result = analyse(opts, calls, lone, chain, traces, baseline, after, sampler, wall, cpu, llm_total, search_log)
    result["summary"]["extract_workers_rss_mb"] = round(helpers / MB, 1)
    return result


def analyse(opts, calls: list[Call], lone: Call, chain: dict, traces: dict[str, Trace], baseline: dict,
            after: dict, sampler: Sampler, wall: float, cpu_s: float, llm_total: int,
            search_log: list[dict]) -> dict[str, Any]:
    done = [c for c in calls if c.status == "complete"]
    failed = [c for c in calls if c.status != "complete"]
    lat = [c.latency_s for c in done]
    # a research holds a slot from its first checkpoint to its last (server clock); a queued one has none
    running_peak = peak_overlap([(t.start, t.end) for rid, t in traces.items() if rid != lone.research_id])

    def critical_steps(c: Call) -> int:
        t = traces.get(c.research_id or "")
        return t.steps if t else 0

    def per_step_ms(c: Call) -> float | None:
        n = critical_steps(c)
        if not n or not c.run_s:
            return None
        injected = critical_injected_s(c.rounds, opts.llm_latency, opts.search_latency, opts.page_latency)
        return (c.run_s - injected) * 1000 / n

    def framework_step_ms(c: Call) -> float | None:
        n = critical_steps(c)
        return c.framework_ms / n if n and c.framework_ms is not None else None

    step_ms = [v for c in done if (v := per_step_ms(c)) is not None]
    fw_ms = [v for c in done if (v := framework_step_ms(c)) is not None]
    total_steps = sum(traces[c.research_id].steps for c in done if c.research_id in traces)
    lone_model = critical_injected_s(lone.rounds, opts.llm_latency, opts.search_latency, opts.page_latency)
    peak_rss = max(after.get("VmHWM", 0), sampler.peak_rss)
    growth = peak_rss - baseline["VmRSS"]
    searches = sum(1 for r in search_log if r["kind"] == "searxng")
    # the logs of the load phase include the lone run's calls (logs were reset before it)
    expected_llm = sum(c.llm_calls for c in done) + lone.llm_calls
    expected_search = sum(c.searches for c in done) + lone.searches
    summary = {
        "researches": len(calls), "concurrency": opts.concurrency, "depth": opts.depth,
        "max_running": opts.max_running, "queue_size": opts.queue_size, "stateless": opts.stateless,
        "cpu_target": opts.cpu_target, "extract_processes": opts.extract_processes, "workers": opts.workers,
        "tcp_nodelay": opts.nodelay, "search_rate_per_s": opts.search_rate,
        "latencies_s": {"llm": opts.llm_latency, "search": opts.search_latency, "page": opts.page_latency},
        "completed": len(done), "failed": len(failed),
        "failures": Counter(f"{c.status}: {c.error}" for c in failed).most_common(5),
        "latency_p50_s": pct(lat, 0.5), "latency_p95_s": pct(lat, 0.95), "latency_max_s": max(lat, default=None),
        "run_p50_s": pct([c.run_s for c in done], 0.5),
        "wall_s": round(wall, 2), "throughput_per_min": round(len(done) / wall * 60, 1) if wall else None,
        "peak_running": running_peak, "peak_unfinished_healthz": sampler.peak_unfinished,
        "rss_baseline_mb": round(baseline["VmRSS"] / MB, 1), "rss_peak_mb": round(peak_rss / MB, 1),
        "rss_end_mb": round(after["VmRSS"] / MB, 1),
        "rss_growth_mb": round(growth / MB, 1),
        "rss_per_running_mb": round(growth / MB / running_peak, 2) if running_peak else None,
        "framework_step_ms_p50": round(pct(fw_ms, 0.5), 2) if fw_ms else None,
        "framework_step_ms_p95": round(pct(fw_ms, 0.95), 2) if fw_ms else None,
        "overhead_step_ms_p50": round(pct(step_ms, 0.5), 2) if step_ms else None,
        "overhead_step_ms_p95": round(pct(step_ms, 0.95), 2) if step_ms else None,
        "steps_per_research": pct([critical_steps(c) for c in done], 0.5),
        "server_cpu_s": round(cpu_s, 2),
        "cpu_ms_per_research": round(cpu_s * 1000 / len(done), 1) if done else None,
        "cpu_ms_per_step": round(cpu_s * 1000 / total_steps, 2) if total_steps else None,
        "lone": {"run_s": lone.run_s, "rounds": lone.rounds, "model_critical_s": round(lone_model, 3),
                 "logged_chain_s": chain.get("seconds"), "logged_chain_length": chain.get("length"),
                 "overhead_step_ms": round(per_step_ms(lone), 2) if per_step_ms(lone) is not None else None,
                 "framework_step_ms": round(framework_step_ms(lone), 2)
                 if framework_step_ms(lone) is not None else None},
        "llm_calls_logged": llm_total, "llm_calls_reported": expected_llm,
        "searches_logged": searches, "searches_reported": expected_search,
        "progress_events_p50": pct([c.progress_events for c in done], 0.5),
    }
    summary["checks"] = {
        "all_completed": len(done) == len(calls),
        "admission_held": running_peak <= opts.max_running,
        "rss_per_running_le_5mb": summary["rss_per_running_mb"] is not None and summary["rss_per_running_mb"] <= 5,
        "framework_step_ms_p50_le_5": summary["framework_step_ms_p50"] is not None
                                      and summary["framework_step_ms_p50"] <= 5,
        "lone_critical_path_model_ok": chain.get("seconds") is not None
                                       and abs(chain["seconds"] - lone_model) <= 0.05 * lone_model + 0.05,
    }
    return {"summary": summary, "calls": [asdict(c) for c in calls], "environment": environment()}


def report(result: dict[str, Any]) -> None:
    s = result["summary"]
    lat = s["latencies_s"]
    print(f"\n{s['researches']} deep_research calls ({s['depth']}), {s['concurrency']} at once, server cap "
          f"{s['max_running']} running + {s['queue_size']} queued in {s['workers']} worker(s), CPU target {s['cpu_target'] or 'default'}, extraction "
          f"processes {'server default' if s['extract_processes'] is None else s['extract_processes']}; injected latency {lat['llm']} s per LLM call, "
          f"{lat['search']} s per search, {lat['page']} s per page; search pace {s['search_rate_per_s']:g}/s, "
          f"TCP_NODELAY fakes: {'yes' if s['tcp_nodelay'] else 'no'}")
    rows = [{"completed": f"{s['completed']}/{s['researches']}", "failed": s["failed"],
             "p50": s["latency_p50_s"], "p95": s["latency_p95_s"], "tput": s["throughput_per_min"],
             "running": s["peak_running"], "rss": f"{s['rss_baseline_mb']} -> {s['rss_peak_mb']}",
             "per": s["rss_per_running_mb"], "fw50": s["framework_step_ms_p50"], "fw95": s["framework_step_ms_p95"],
             "step50": s["overhead_step_ms_p50"]}]
    print_table(rows, [("completed", "completed"), ("failed", "failed"), ("p50", "latency p50 s"),
                       ("p95", "latency p95 s"), ("tput", "researches/min"), ("running", "peak running"),
                       ("rss", "RSS MB (warm -> peak)"), ("per", "MB per running"),
                       ("fw50", "framework ms/step p50"), ("fw95", "p95"), ("step50", "overhead ms/step p50")])
    lone = s["lone"]
    print(f"\nalone: run {lone['run_s']:.2f} s, critical path {lone['logged_chain_s']} s logged vs "
          f"{lone['model_critical_s']} s modelled, framework {lone['framework_step_ms']} ms/step, "
          f"overhead {lone['overhead_step_ms']} ms/step; "
          f"{s['steps_per_research']} super-steps on a research's critical path")
    print(f"extraction workers' RSS after the load: {s.get('extract_workers_rss_mb')} MB (not in the figures above)")
    print(f"server CPU during the load: {s['server_cpu_s']} s = {s['cpu_ms_per_research']} ms per research, "
          f"{s['cpu_ms_per_step']} ms per super-step")
    print(f"instrument saw {s['llm_calls_logged']} LLM calls (results report {s['llm_calls_reported']}) and "
          f"{s['searches_logged']} searches (results report {s['searches_reported']})")
    for f, n in s["failures"]:
        print(f"  {n} x {f}")
    for name, ok in s["checks"].items():
        print(f"  {'PASS' if ok else 'MISS'}  {name}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", help="folder of the reference instrument (default ../shared/bench)")
    ap.add_argument("--short", action="store_true", help="CI size: 12 calls, quick depth, fast fakes")
    ap.add_argument("--researches", type=int, help="deep_research calls in total (default 100)")
    ap.add_argument("--concurrency", type=int, help="calls in flight at once from the clients (default 100)")
    ap.add_argument("--depth", choices=["quick", "standard", "deep"], help="(default standard)")
    ap.add_argument("--llm-latency", type=float, help="seconds per LLM call (default 1.0)")
    ap.add_argument("--search-latency", type=float, help="seconds per search (default 0.3)")
    ap.add_argument("--page-latency", type=float, help="seconds per page fetch (default 0.2)")
    ap.add_argument("--max-running", type=int, help="the server's concurrent research cap (default 50)")
    ap.add_argument("--queue-size", type=int, help="the server's queue (default 100)")
    ap.add_argument("--stateless", action="store_true", help="run the server with --stateless")
    ap.add_argument("--workers", type=int, default=1,
                    help="server worker processes on the port (implies --stateless; the cap and queue are split)")
    ap.add_argument("--cpu-target", type=float,
                    help="DEEP_RESEARCH_CPU_TARGET: share of one core above which queued researches wait "
                         "(default: the server's, 0.8; 1 turns the gate off)")
    ap.add_argument("--extract-processes", type=int,
                    help="DEEP_RESEARCH_EXTRACT_PROCESSES (default: the HTTP server's, one per core up to 4)")
    ap.add_argument("--search-rate", type=float, default=10_000,
                    help="the server's search starts per second per provider (DEEP_RESEARCH_RATE_LIMIT_PER_S; "
                         "default 10000: no pacing, the engine is local; the product default is 10)")
    ap.add_argument("--nodelay", action=argparse.BooleanOptionalAction, default=True,
                    help="TCP_NODELAY on the instrument's servers, as production servers have (default); "
                         "--no-nodelay adds the stdlib server's ~40 ms delayed-ACK stall to every call")
    ap.add_argument("--time-limit", type=float, default=600, help="seconds a call may take before it counts "
                                                                  "as failed (default 600)")
    ap.add_argument("--strict", action="store_true",
                    help="also fail (exit 1) on the RSS and ms/step targets, not only on lost calls")
    ap.add_argument("--results-dir", help="where to write the JSON (default benchmarks/results)")
    opts = ap.parse_args(argv)
    base = SHORT if opts.short else FULL
    for key, default in (("researches", "researches"), ("concurrency", "concurrency"), ("depth", "depth"),
                         ("llm_latency", "llm"), ("search_latency", "search"), ("page_latency", "page"),
                         ("max_running", "max_running"), ("queue_size", "queue_size")):
        if getattr(opts, key) is None:
            setattr(opts, key, base[default])
    if min(opts.researches, opts.concurrency, opts.max_running) < 1 or opts.queue_size < 0:
        ap.error("--researches, --concurrency and --max-running must be at least 1; --queue-size at least 0")
    try:
        result = asyncio.run(run(opts))
    except (InstrumentMissing, RuntimeError) as e:
        print(f"load: {e}", file=sys.stderr)
        return 2
    report(result)
    path = write_json("load", result, opts.results_dir)
    print(f"\nwrote {path}")
    checks = result["summary"]["checks"]
    hard = checks["all_completed"] and checks["admission_held"]
    soft = checks["rss_per_running_le_5mb"] and checks["framework_step_ms_p50_le_5"]
    return 0 if hard and (soft or not opts.strict) else 1


if __name__ == "__main__":
    sys.exit(main())
