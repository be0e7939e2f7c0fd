"""deep-research: the command line.

    deep-research "question" [--depth quick|standard|deep] [--provider NAME]... [--corpus PATH]
                             [--model NAME] [--length concise|standard|detailed] [--json] [--out FILE]
    deep-research --demo "question"     offline: scripted model over the shipped sample corpus
    deep-research resume ID             continue an interrupted research
    deep-research search "query"        one web search, structured results
    deep-research read URL              one page as markdown
    deep-research serve [...]           the MCP server (same options as deep-research-mcp)

Progress goes to stderr, the report to stdout (or --out). Exit codes: 0 report written (complete or
partial), 1 the research failed, 2 bad input or configuration, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any

from rich.console import Console
from rich.markdown import Markdown

err = Console(stderr=True, highlight=False)
SUBCOMMANDS = {"search", "read", "serve", "resume"}
OLLAMA = "http://127.0.0.1:11434/v1"


class UserError(Exception):
    """A problem the user fixes; printed as one line, exit code 2."""


# -- model endpoint discovery -------------------------------------------------------------------

def find_local_model(model: str | None) -> tuple[str, str] | None:
    """(base_url, model) of a local Ollama server if one answers, else None."""
    import httpx

    try:
        resp = httpx.get(f"{OLLAMA}/models", timeout=0.7)
        resp.raise_for_status()
        names = [m["id"] for m in resp.json().get("data", [])]
    except (httpx.HTTPError, ValueError, KeyError):
        return None
    if model:
        return OLLAMA, model
    return (OLLAMA, names[0]) if names else None


def ensure_model_endpoint(model: str | None) -> dict[str, str]:
    """Overrides that point the run at a model, or a UserError that says how to configure one."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("DEEP_RESEARCH_API_KEY") \
            or os.environ.get("OPENAI_BASE_URL") or os.environ.get("DEEP_RESEARCH_BASE_URL"):
        return {}
    found = find_local_model(model)
    if found:
        err.print(f"[dim]No OPENAI_API_KEY or OPENAI_BASE_URL set; using Ollama at {found[0]} "
                  f"with model {found[1]}[/dim]")
        return {"base_url": found[0], "model": found[1]}
    raise UserError(
        "No language model is configured. Set OPENAI_API_KEY for OpenAI, or OPENAI_BASE_URL for any "
        "OpenAI-compatible server, e.g.\n"
        "  export OPENAI_BASE_URL=http://127.0.0.1:11434/v1 DEEP_RESEARCH_MODEL=qwen3:8b   # Ollama\n"
        "or try it offline first: deep-research --demo \"your question\"")


# -- progress display ---------------------------------------------------------------------------

class Progress:
    """Stage lines on stderr: a live spinner on a terminal, plain timestamped lines otherwise
    (with a heartbeat every 10 s, so logs show a long stage is still alive)."""

    def __init__(self, research_id: str):
        self.t0 = time.monotonic()
        self.stage = "starting"
        self.live = err.is_terminal
        self.status = err.status("Starting research", spinner="dots") if self.live else None
        self.research_id = research_id

    def __enter__(self) -> "Progress":
        if self.status:
            self.status.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.status:
            self.status.stop()

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.t0:5.1f}s"

    def on_event(self, event: dict[str, Any]) -> None:
        self.stage = event.get("stage", self.stage)
        line = f"[dim]{self.elapsed()}[/dim] {event.get('message', self.stage)}"
        if self.status:
            self.status.update(event.get("message", self.stage))
        err.print(line)

    async def heartbeat(self) -> None:
        while True:
            await asyncio.sleep(10)
            if not self.live:
                err.print(f"[dim]{self.elapsed()}[/dim] still {self.stage}")


# -- commands -----------------------------------------------------------------------------------

def research_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="deep-research", description="Research a question on the web and "
                                "write a cited report.", epilog="Other commands: resume ID | search QUERY | "
                                "read URL | serve. Environment: OPENAI_API_KEY, OPENAI_BASE_URL, "
                                "DEEP_RESEARCH_MODEL, DEEP_RESEARCH_PROVIDERS, provider keys (see README).")
    p.add_argument("question", help="the question, in quotes")
    p.add_argument("--depth", help="quick | standard | deep (basic = quick); default standard")
    p.add_argument("--provider", action="append", help="search provider (repeat or comma-separate): "
                   "duckduckgo, searxng, tavily, serper, brave, exa, openai, local")
    p.add_argument("--corpus", help="folder of .md/.txt/.html files for the local provider")
    p.add_argument("--model", help="model name for every stage (DEEP_RESEARCH_MODEL)")
    p.add_argument("--length", dest="report_length", help="report length: concise | standard | detailed")
    p.add_argument("--rounds", dest="max_rounds", type=int, help="search/reflect rounds at most")
    p.add_argument("--breadth", type=int, help="sub-queries per round")
    p.add_argument("--pages", dest="pages_per_query", type=int, help="pages read per sub-query")
    p.add_argument("--time-budget", dest="time_budget_s", type=float, help="seconds before writing up")
    p.add_argument("--json", action="store_true", help="print the ResearchResult as JSON")
    p.add_argument("--out", help="also write the report (or JSON with --json) to this file")
    p.add_argument("--demo", action="store_true", help="offline: scripted model over the sample corpus")
    p.add_argument("--no-save", action="store_true", help="do not checkpoint (no resume after a crash)")
    p.add_argument("--debug", action="store_true", help="verbose logs on stderr")
    return p


def build_settings(args: argparse.Namespace):
    from graph.settings import make_settings
    from graph.testing import offline_settings

    providers = None
    if args.provider:
        providers = [p.strip() for item in args.provider for p in item.split(",") if p.strip()]
    if providers is None and args.corpus:
        providers = ["local"]
    overrides = dict(depth=args.depth, providers=providers, corpus=args.corpus, model=args.model,
                     report_length=args.report_length, max_rounds=args.max_rounds, breadth=args.breadth,
                     pages_per_query=args.pages_per_query, time_budget_s=args.time_budget_s)
    if args.demo:
        return offline_settings(**{k: v for k, v in overrides.items() if v is not None and k != "providers"})
    overrides.update(ensure_model_endpoint(args.model))
    return make_settings(**overrides)


def print_result(result, args: argparse.Namespace) -> None:
    text = result.model_dump_json(indent=2) if args.json else result.report
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        err.print(f"[dim]Wrote {args.out}[/dim]")
    if args.json:
        print(text)
    elif sys.stdout.isatty():
        Console().print(Markdown(result.report))
    else:
        print(result.report)
    s = result.stats
    colour = {"complete": "green", "partial": "yellow", "failed": "red"}[result.status]
    err.print(f"[{colour}]{result.status}[/{colour}] ({result.stop_reason}) · {s.rounds} round(s), "
              f"{s.searches} searches, {s.pages_read} pages read, {len(result.sources)} sources, "
              f"{s.llm_calls} LLM calls, {s.prompt_tokens + s.completion_tokens:,} tokens, "
              f"{s.duration_ms / 1000:.1f}s · id {result.research_id}")
    for w in result.warnings:
        err.print(f"[yellow]warning:[/yellow] {w}")


async def run_with_signals(make_run, resume: bool, save: bool):
    """Run a research; the first SIGINT/SIGTERM stops it and returns what was found (the saved
    steps stay resumable), a second one exits at once."""
    from graph.persistence import open_checkpointer
    from graph.runner import ResearchRun

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    hits = 0

    def on_signal() -> None:
        nonlocal hits
        hits += 1
        if hits > 1:
            os._exit(130)
        err.print("[yellow]Stopping: finished steps are saved; press Ctrl-C again to quit at once.[/yellow]")
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)

    async def drive(checkpointer):
        run: ResearchRun = await make_run(checkpointer)
        with Progress(run.research_id) as progress:
            run.on_event = progress.on_event
            err.print(f"[dim]research id {run.research_id}[/dim]")
            beat = asyncio.create_task(progress.heartbeat())
            work = asyncio.create_task(run.resume() if resume else run.start())
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
            beat.cancel()
            stopper.cancel()
            if work.done():
                return work.result(), False
            work.cancel()
            try:
                await asyncio.wait_for(work, timeout=8)
            except (asyncio.CancelledError, TimeoutError, Exception):
                pass
            note = (f"interrupted; resume with: deep-research resume {run.research_id}" if save
                    else "interrupted")
            return run.partial("cancelled", note), True

    if save:
        async with open_checkpointer() as checkpointer:
            return await drive(checkpointer)
    return await drive(None)


async def cmd_research(argv: list[str]) -> int:
    args = research_parser().parse_args(argv)
    setup_logging(args.debug)
    settings = build_settings(args)
    from graph.runner import ResearchRun

    async def make_run(checkpointer):
        return ResearchRun(args.question, settings, checkpointer=checkpointer)

    result, interrupted = await run_with_signals(make_run, resume=False, save=not args.no_save)
    print_result(result, args)
    if interrupted:
        return 130
    return 1 if result.status == "failed" else 0


async def cmd_resume(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="deep-research resume", description="Continue an interrupted research.")
    p.add_argument("research_id")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out")
    p.add_argument("--debug", action="store_true")
    args = p.parse_args(argv)
    setup_logging(args.debug)
    from graph.runner import ResearchRun

    async def make_run(checkpointer):
        return await ResearchRun.saved(args.research_id, checkpointer)

    result, interrupted = await run_with_signals(make_run, resume=True, save=True)
    print_result(result, args)
    return 130 if interrupted else (1 if result.status == "failed" else 0)


async def cmd_search(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="deep-research search", description="One web search.")
    p.add_argument("query")
    p.add_argument("--provider", action="append", help="provider(s); default DEEP_RESEARCH_PROVIDERS or duckduckgo")
    p.add_argument("--corpus")
    p.add_argument("-n", "--max-results", type=int, default=8)
    p.add_argument("--freshness", choices=["day", "week", "month", "year"])
    p.add_argument("--region")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from graph.settings import make_settings
    from tools.base import validate_request
    from tools.providers import build_providers
    from tools.search import search_all

    names = [x.strip() for item in args.provider for x in item.split(",")] if args.provider else None
    if names is None and args.corpus:
        names = ["local"]
    settings = make_settings(providers=names, corpus=args.corpus)
    providers = build_providers(settings.providers, corpus=settings.corpus)
    resp = await search_all(providers, validate_request(query=args.query, max_results=args.max_results,
                                                        freshness=args.freshness, region=args.region))
    if args.json:
        print(resp.model_dump_json(indent=2, exclude={"results": {"__all__": {"raw_content"}}}))
        return 0
    for i, h in enumerate(resp.results, 1):
        print(f"{i}. {h.title}\n   {h.url}\n   {' '.join(h.content.split())[:240]}\n")
    m = resp.metadata
    err.print(f"[dim]{len(resp.results)} results from {m.provider} in {m.time_taken:.2f}s[/dim]")
    for w in resp.warnings:
        err.print(f"[yellow]warning:[/yellow] {w}")
    return 0


async def cmd_read(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="deep-research read", description="Read one page as markdown.")
    p.add_argument("url")
    p.add_argument("--max-chars", type=int, default=20_000)
    p.add_argument("--start-char", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from tools.reader import read_page

    page = await read_page(args.url, max_chars=args.max_chars, start_char=args.start_char)
    if args.json:
        print(page.model_dump_json(indent=2))
        return 0
    if page.title:
        print(f"# {page.title}\n")
    print(page.text)
    more = f"; read on with --start-char {page.start_char + len(page.text)}" if page.truncated else ""
    err.print(f"[dim]{page.final_url} · {page.content_type} · {page.total_chars:,} chars{more}[/dim]")
    return 0


def setup_logging(debug: bool) -> None:
    level = "DEBUG" if debug else os.environ.get("DEEP_RESEARCH_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for noisy in ("httpx", "httpcore", "bm25s", "trafilatura", "openai"):
        logging.getLogger(noisy).setLevel(max(logging.getLevelName(level), logging.WARNING)
                                          if not debug else logging.INFO)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":
        import server

        return server.main(argv[1:]) or 0
    commands = {"search": cmd_search, "read": cmd_read, "resume": cmd_resume}
    command = commands.get(argv[0]) if argv else None
    from graph.llm import LLMError
    from graph.settings import SettingsError
    from tools.base import ToolError

    try:
        code = asyncio.run(command(argv[1:]) if command else cmd_research(argv))
    except (UserError, SettingsError, LLMError) as e:
        err.print(f"[red]error:[/red] {e}")
        code = 2
    except ToolError as e:
        err.print(f"[red]error ({e.kind.value}):[/red] {e.message}")
        code = 2
    except KeyboardInterrupt:
        code = 130
    return code


if __name__ == "__main__":
    sys.exit(main())
