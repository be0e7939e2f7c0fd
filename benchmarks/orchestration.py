"""Orchestration speed under the reference instrument: how close the agent runs to the physical limit.

Every LLM call, search and page fetch takes a fixed time (fakellm, fakesearch), and the agent runs
its whole real path against them: ChatOpenAI over HTTP, the SearXNG provider, the page reader. The
servers' own logs give the figures, computed as for the peers in ../shared/bench/README.md:

    wall s        the graph's start to its result (ResearchRun.start(), in this process)
    chain s       the longest chain of LLM calls, searches and page reads that ran one after another:
                  no orchestration of this same work can finish faster
    wall/chain    framework overhead over that limit (target <= 1.05)
    LLM calls, sequential LLM calls (fakellm's chain.py), prompt / completion tokens (fakellm's count)
    searches, pages fetched (fakesearch's log), pages read and sources cited (the result)

usage:
    uv run python benchmarks/orchestration.py                     # quick, standard, deep at 0.5/0.3/0.3 s
    uv run python benchmarks/orchestration.py --short             # CI: quick + standard at 0.1/0.05/0.05 s
    uv run python benchmarks/orchestration.py --bench ../shared/bench --depths standard --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import (InstrumentMissing, critical_path, environment, find_bench_dir, load_chain,
                               patched_env, print_table, start_instrument, write_json)

QUESTION = "What are the health effects of microplastics in drinking water, and how can they be removed?"
WARMUP_QUESTION = "How do heat pumps perform in cold climates?"
# standard instrument settings (the peers' table) and the short CI variant
FULL = {"llm": 0.5, "search": 0.3, "page": 0.3, "depths": ["quick", "standard", "deep"]}
SHORT = {"llm": 0.1, "search": 0.05, "page": 0.05, "depths": ["quick", "standard"]}
PEERS = [
    {"system": "gemini-fullstack-langgraph-quickstart", "wall_s": 4.0, "llm_calls": 10, "sequential_llm": 6,
     "prompt_tokens": 6100, "searches": 6},
    {"system": "local-deep-researcher", "wall_s": 10.4, "llm_calls": 9, "sequential_llm": 9,
     "prompt_tokens": 13900, "searches": 4},
    {"system": "open_deep_research", "wall_s": 39.5, "llm_calls": 267, "sequential_llm": 57,
     "prompt_tokens": 546000, "searches": 45},
]
COLUMNS = [("depth", "depth"), ("wall_s", "wall s"), ("chain_s", "chain s"), ("wall_over_chain", "wall/chain"),
           ("llm_calls", "LLM calls"), ("sequential_llm", "sequential LLM"), ("prompt_tokens", "prompt tok"),
           ("completion_tokens", "completion tok"), ("searches", "searches"), ("pages_fetched", "pages fetched"),
           ("pages_read", "pages read"), ("sources_cited", "cited"), ("citations_resolved", "cites resolve"),
           ("chain_idle_ms", "idle on chain ms"), ("max_gap_ms", "max gap ms"), ("cpu_ms", "agent CPU ms")]


def reset_process_caches() -> None:
    """Forget objects built from an earlier environment (settings, providers, chat models)."""
    from graph import llm
    from graph.nodes import search
    from tools.settings import reset_tool_settings

    reset_tool_settings()
    search._provider_cache.clear()
    llm._models.clear()


@contextlib.contextmanager
def pointed_at(instrument) -> Iterator[None]:
    """The agent's environment pointed at the instrument for the block, and process-wide caches built
    from it forgotten on the way in and out (nothing leaks into a later run in the same process)."""
    with patched_env(instrument.agent_env()):
        reset_process_caches()
        try:
            yield
        finally:
            reset_process_caches()


async def run_once(depth: str, question: str) -> tuple[Any, Any, float, float]:
    """One research at `depth` on the environment's endpoints: (ResearchRun, result, wall seconds,
    this process's CPU seconds). CPU time is the framework's own work (the servers are other
    processes): on a busy machine it is the steadier measure of overhead."""
    from graph.runner import ResearchRun, graph_for
    from graph.settings import make_settings

    graph_for(None)  # compile outside the timed span: a server compiles once, not per research
    run = ResearchRun(question, make_settings(depth=depth))
    t0, c0 = time.perf_counter(), time.process_time()
    result = await run.start()
    return run, result, time.perf_counter() - t0, time.process_time() - c0


def analyse(instrument, run, result, wall: float, cpu: float, chain_of) -> dict[str, Any]:
    """Figures for one run from the instrument's logs and the result."""
    from benchmarks.eval import citation_integrity, read_texts

    instrument.settle()
    llm_calls = instrument.llm_calls()
    requests = instrument.search_requests()
    llm = chain_of(str(instrument.llm_log))
    crit = critical_path(llm_calls + requests)
    integrity = citation_integrity(result, read_texts(run.state))
    stats = result.stats
    return {
        "status": result.status, "stop_reason": result.stop_reason, "rounds": stats.rounds,
        "wall_s": round(wall, 3), "chain_s": crit["seconds"], "cpu_ms": round(cpu * 1000, 1),
        "wall_over_chain": round(wall / crit["seconds"], 3) if crit["seconds"] else None,
        "chain_links": crit["length"], "chain_kinds": crit["kinds"],
        "chain_idle_ms": round(crit["idle_s"] * 1000, 1), "max_gap_ms": crit["max_gap_ms"],
        "llm_calls": llm["calls"], "sequential_llm": llm["sequential_calls"],
        "llm_chain_s": llm["chain_seconds"], "llm_span_s": llm["llm_span_seconds"],
        "prompt_tokens": llm["prompt_tokens"], "completion_tokens": llm["completion_tokens"],
        "searches": sum(1 for r in requests if r["kind"] != "page"),
        "pages_fetched": sum(1 for r in requests if r["kind"] == "page"),
        "pages_read": stats.pages_read, "sources_cited": integrity["sources_cited"],
        "citations_resolved": integrity["markers_resolved_share"],
        "citation_support": integrity["supported_share"],
        "agent_reported": {"llm_calls": stats.llm_calls, "prompt_tokens": stats.prompt_tokens,
                           "completion_tokens": stats.completion_tokens, "searches": stats.searches,
                           "duration_ms": stats.duration_ms, "stage_ms": stats.stage_ms},
        "cited_urls": integrity["cited_urls"], "read_urls": [s.url for s in result.sources],
        "warnings": result.warnings,
    }


async def transport_stall_ms(instrument, n: int = 5) -> float:
    """Median time from the LLM server's logged end of a response to the client holding it, over a
    kept-alive connection: ~40 ms when the server's response waits for a delayed ACK (see
    common._NODELAY_LAUNCHER), ~0.5 ms otherwise. It lands on every link of the chain."""
    import httpx

    async with httpx.AsyncClient(base_url=instrument.llm_base_url) as client:
        body = {"model": "fake", "messages": [{"role": "user", "content": "ping"}]}
        await client.post("/chat/completions", json=body)
        stalls = []
        for _ in range(n):
            instrument.settle(0.01)
            before = len(instrument.llm_calls())
            await client.post("/chat/completions", json=body)
            got = time.time()
            instrument.settle(0.01)
            calls = instrument.llm_calls()
            if len(calls) > before:
                stalls.append((got - calls[-1]["end"]) * 1000)
    instrument.reset_logs()
    return round(statistics.median(stalls), 1) if stalls else float("nan")


async def measure(bench: Path, depths: list[str], llm_s: float, search_s: float, page_s: float,
                  repeat: int, question: str, warmup: bool, nodelay: bool = False) -> tuple[list[dict[str, Any]], float]:
    chain_of = load_chain(bench)
    rows: list[dict[str, Any]] = []
    with start_instrument(bench, llm_s, search_s, page_s, sufficient=False, nodelay=nodelay) as inst:
        stall = await transport_stall_ms(inst)
        with pointed_at(inst):
            if warmup:  # pay for lazy imports and first connections outside the figures
                await run_once("quick", WARMUP_QUESTION)
            for depth in depths:
                runs = []
                for _ in range(repeat):
                    inst.reset_logs()
                    run, result, wall, cpu = await run_once(depth, question)
                    if result.status == "failed":
                        raise RuntimeError(f"{depth}: the research failed: {result.warnings}")
                    runs.append(analyse(inst, run, result, wall, cpu, chain_of))
                # the median run by wall time stands for the depth; every run is kept in the JSON
                med = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
                row = {"depth": depth, **med, "runs": runs}
                if repeat > 1:
                    row["wall_s_all"] = [r["wall_s"] for r in runs]
                    row["wall_s_stdev"] = round(statistics.pstdev(row["wall_s_all"]), 3)
                rows.append(row)
                print(f"  {depth}: {row['wall_s']:.2f} s wall, {row['sequential_llm']} sequential LLM calls, "
                      f"{row['pages_read']} pages read", file=sys.stderr, flush=True)
    return rows, stall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", help="folder of the reference instrument (default ../shared/bench)")
    ap.add_argument("--short", action="store_true",
                    help="CI mode: quick + standard at 0.1 s per LLM call, 0.05 s per search and page")
    ap.add_argument("--depths", help="comma-separated subset of quick,standard,deep")
    ap.add_argument("--llm-latency", type=float, help="seconds per LLM call (default 0.5; 0.1 with --short)")
    ap.add_argument("--search-latency", type=float, help="seconds per search (default 0.3)")
    ap.add_argument("--page-latency", type=float, help="seconds per page fetch (default 0.3)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per depth; the median by wall time is shown")
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--no-warmup", action="store_true", help="include first-run import and connection costs")
    ap.add_argument("--nodelay", action="store_true",
                    help="give the instrument's servers TCP_NODELAY, as production servers have (removes the "
                         "~40 ms delayed-ACK stall per kept-alive response; not comparable with the peer table)")
    ap.add_argument("--results-dir", help="where to write the JSON (default benchmarks/results)")
    args = ap.parse_args(argv)

    try:
        bench = find_bench_dir(args.bench)
    except InstrumentMissing as e:
        print(f"SKIPPED orchestration benchmark: {e}")
        return 0
    base = SHORT if args.short else FULL
    depths = [d.strip() for d in args.depths.split(",")] if args.depths else base["depths"]
    bad = [d for d in depths if d not in ("quick", "standard", "deep")]
    if bad or args.repeat < 1:
        ap.error(f"--depths: unknown {bad}; use quick, standard, deep" if bad else "--repeat: at least 1")
    llm_s = base["llm"] if args.llm_latency is None else args.llm_latency
    search_s = base["search"] if args.search_latency is None else args.search_latency
    page_s = base["page"] if args.page_latency is None else args.page_latency

    print(f"Reference instrument {bench}: {llm_s} s per LLM call, {search_s} s per search, {page_s} s per page, "
          f"sufficient=false{', TCP_NODELAY servers' if args.nodelay else ''}; question: {args.question!r}",
          flush=True)
    rows, stall = asyncio.run(measure(bench, depths, llm_s, search_s, page_s, args.repeat, args.question,
                                      not args.no_warmup, args.nodelay))
    print_table(rows, COLUMNS, title="deep-research-mcp under the reference instrument")
    print(f"\nTransport stall per kept-alive response (server's logged end -> client has it): {stall} ms")
    if not args.short and not args.nodelay and llm_s == 0.5 and search_s == 0.3 and page_s == 0.3:
        print_table(PEERS, [("system", "peer (standard settings)"), ("wall_s", "wall s"), ("llm_calls", "LLM calls"),
                            ("sequential_llm", "sequential LLM"), ("prompt_tokens", "prompt tok"),
                            ("searches", "searches")], title="Peers, same instrument (../shared/bench/README.md)")
    name = "orchestration" + ("-short" if args.short else "") + ("-nodelay" if args.nodelay else "")
    path = write_json(name, {
        "question": args.question, "instrument": {"bench_dir": str(bench), "llm_latency_s": llm_s,
                                                   "search_latency_s": search_s, "page_latency_s": page_s,
                                                   "sufficient": False, "tcp_nodelay": args.nodelay,
                                                   "transport_stall_ms": stall},
        "environment": environment(), "rows": rows}, args.results_dir)
    print(f"\nJSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
