"""deep-research-mcp: the research graph, web search and page reading as an MCP server.

Thin on purpose: argument schemas, progress, errors and transports live here; the research itself
lives in graph/ (graph.jobs owns running researches). LangGraph and LangChain are imported on the
first research, never at import time, so a client that spawns this server gets `tools/list` fast.

    deep-research-mcp                                  # stdio (what Claude Desktop/Code spawn)
    deep-research-mcp --transport http --port 8000     # Streamable HTTP on 127.0.0.1:8000/mcp
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import ipaddress
import logging
import os
import re
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from graph.jobs import AdmissionError, Job, ResearchJobs, ServerSettings, UnknownResearch, open_jobs
from graph.persistence import ResearchRecord
from graph.settings import PRESETS, SettingsError, describe_validation_error
from graph.state import ResearchResult

log = logging.getLogger("deep_research.server")
VERSION = "0.1.0"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
Freshness = Literal["day", "week", "month", "year"]


# -- output schemas ------------------------------------------------------------------------------

class Progress(BaseModel):
    stage: str = Field(description="queued | starting | planning | searching | reading | extracting | "
                                   "reflecting | writing | done")
    message: str = ""
    elapsed_s: float = 0.0


class ResearchOutput(ResearchResult):
    """A ResearchResult, or the state of a research that is still running (then `report` is empty)."""

    status: Literal["complete", "partial", "failed", "queued", "running", "interrupted", "cancelled"]
    progress: Progress | None = None
    next_step: str | None = Field(None, description="What to call next when the research is not finished.")


class SearchResultsOut(BaseModel):
    results: list[dict[str, Any]] = Field(description="title, url, content, score, category, engine, published_date")
    metadata: dict[str, Any] = Field(description="query, total_results, time_taken, provider")
    warnings: list[str] = Field(default_factory=list)


class PageOut(BaseModel):
    url: str
    final_url: str
    title: str = ""
    published_date: str | None = None
    text: str = Field(description="Markdown of the window [start_char, start_char + len(text)).")
    start_char: int
    total_chars: int
    truncated: bool = Field(description="True when more text follows: call again with start_char=next_start.")
    next_start: int | None = None


# -- descriptions ---------------------------------------------------------------------------------

def _depths() -> str:
    return "; ".join(f"{name}: {p.describe()}" for name, p in PRESETS.items())


DEEP_RESEARCH_DOC = f"""Research a question on the web and return a cited report (markdown with [n] markers
and a numbered source list), key findings, the sources and run statistics.

Use it for questions that need several searches and reading whole pages: comparisons, current
state of a field, claims that need sources. For one fact or a single page, web_search or read_page
is faster and cheaper. Each research makes several LLM calls and many searches and page reads;
depth sets the cost ({_depths()}; basic = quick). A standard run takes one to a few minutes.

Progress is reported while it runs. If it is not done within the server's wait limit (about 50 s)
or wait=false, the call returns status "running" with a research_id: call research_status with that
id to collect the result. The research keeps running on the server either way."""

INSTRUCTIONS = ("Deep research: deep_research writes cited reports (long-running; poll research_status "
                "when it answers 'running'); web_search and read_page are the quick tools.")


# -- the server -----------------------------------------------------------------------------------

class ResearchServer(MCPServer):
    """MCPServer plus readable argument errors and a resource list of recent researches."""

    def __init__(self, jobs: ResearchJobs, **kwargs: Any):
        super().__init__("deep-research", version=VERSION, instructions=INSTRUCTIONS, **kwargs)
        self.jobs = jobs

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):  # name the argument and what it accepts
                raise ToolError(f"invalid arguments for {name}: "
                                f"{describe_validation_error(e.__cause__)}") from None
            raise

    async def list_resources(self) -> list[Any]:
        from mcp.types import Resource

        out = list(await super().list_resources())
        for rec in await self.jobs.store.list_recent(limit=25):
            when = _iso(rec.created_at)
            out.append(Resource(uri=f"research://{rec.research_id}", name=rec.research_id,
                                title=f"{rec.question[:80]} ({rec.status}, {when})",
                                description=f"{rec.status} research started {when}: {rec.question[:300]}",
                                mime_type="application/json"))
        return out


def _iso(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def create_server(jobs: ResearchJobs, **kwargs: Any) -> ResearchServer:
    """The MCP server over a research registry (open one with graph.jobs.open_jobs)."""
    server = ResearchServer(jobs, **kwargs)
    cfg = jobs.config

    def client_key(ctx: Context) -> str:
        request = getattr(ctx.request_context, "request", None)
        if request is None:
            return "stdio"  # one client per process
        return request.scope.get("deep_research.client") or (request.client.host if request.client else "?")

    async def relay(ctx: Context, job: Job, timeout: float) -> bool:
        count = 0

        async def on_progress(event: dict[str, Any]) -> None:
            nonlocal count
            count += 1
            # progress must grow on every notification; clients reset their timeouts on each one
            await ctx.report_progress(count, None, message=event.get("message") or event.get("stage"))

        return await jobs.wait(job, timeout, on_progress)

    built: dict[tuple, list[Any]] = {}

    async def providers_for(names: list[str], corpus: str | None) -> list[Any]:
        # built once per set: the local provider indexes its corpus, in a thread so the loop stays free
        key = (tuple(names), corpus)
        if key not in built:
            from tools.providers import build_providers

            built[key] = await asyncio.to_thread(build_providers, names, corpus=corpus)
        return built[key]

    async def wait_and_answer(ctx: Context, job: Job, wait: bool) -> CallToolResult:
        if wait and cfg.wait_timeout_s > 0:
            await relay(ctx, job, cfg.wait_timeout_s)
        return answer(job)

    @server.tool(annotations=ToolAnnotations(title="Deep research", read_only_hint=True, open_world_hint=True,
                                             idempotent_hint=False, destructive_hint=False),
                 description=DEEP_RESEARCH_DOC)
    async def deep_research(
        question: Annotated[str, Field(description="The question, in words (at most 2000 characters).")],
        ctx: Context,
        depth: Annotated[Literal["quick", "standard", "deep", "basic"], Field(
            description="Cost/thoroughness preset; see the tool description.")] = "standard",
        report_length: Literal["concise", "standard", "detailed"] = "standard",
        max_rounds: Annotated[int | None, Field(ge=1, le=8, description="Search/reflect rounds at most.")] = None,
        breadth: Annotated[int | None, Field(ge=1, le=10, description="Sub-queries per round.")] = None,
        max_sources: Annotated[int | None, Field(ge=1, le=300, description="Sources held at most.")] = None,
        providers: Annotated[list[str] | None, Field(
            description="Search providers, fused when several: duckduckgo, tavily, serper, brave, exa, "
                        "searxng, openai, local. Default: the server's configuration.")] = None,
        freshness: Freshness | None = None,
        region: Annotated[str | None, Field(max_length=16, description="e.g. us-en, de-de")] = None,
        include_domains: Annotated[list[str] | None, Field(description="Only these domains.")] = None,
        exclude_domains: Annotated[list[str] | None, Field(description="Never these domains.")] = None,
        time_budget_s: Annotated[float | None, Field(ge=5, le=7200, description=(
            "Seconds before the research stops searching and writes from what it has."))] = None,
        wait: Annotated[bool, Field(description=(
            "Wait for the report (up to the server's wait limit). false: return a research_id at once."))] = True,
    ) -> Annotated[CallToolResult, ResearchOutput]:
        overrides = dict(depth=depth, report_length=report_length, max_rounds=max_rounds, breadth=breadth,
                         max_sources=max_sources, providers=providers, freshness=freshness, region=region,
                         include_domains=include_domains, exclude_domains=exclude_domains,
                         time_budget_s=time_budget_s)
        with _tool_errors():
            job = await jobs.submit(question, overrides, client=client_key(ctx))
        return await wait_and_answer(ctx, job, wait)

    @server.tool(annotations=ToolAnnotations(title="Research status", read_only_hint=True, idempotent_hint=True))
    async def research_status(
        research_id: Annotated[str, Field(min_length=1, max_length=64)],
        ctx: Context,
        wait_s: Annotated[float, Field(ge=0, le=50, description=(
            "Wait up to this long for the research to finish, with progress."))] = 0,
    ) -> Annotated[CallToolResult, ResearchOutput]:
        """The progress of a research, or its result (report included) when it has finished."""
        with _tool_errors():
            found = await jobs.lookup(research_id)
        if isinstance(found, Job) and wait_s > 0:
            await relay(ctx, found, wait_s)
        return answer(found)

    @server.tool(annotations=ToolAnnotations(title="Cancel research", read_only_hint=False,
                                             destructive_hint=False, idempotent_hint=True))
    async def cancel_research(research_id: Annotated[str, Field(min_length=1, max_length=64)]
                              ) -> Annotated[CallToolResult, ResearchOutput]:
        """Stop a running research and keep what it found: a partial report from the sources read so far.
        Works from any server replica sharing the research store."""
        with _tool_errors():
            return answer(await jobs.cancel(research_id))

    @server.tool(annotations=ToolAnnotations(title="Resume research", read_only_hint=True, open_world_hint=True,
                                             idempotent_hint=False))
    async def resume_research(
        research_id: Annotated[str, Field(min_length=1, max_length=64)],
        ctx: Context,
        wait: bool = True,
    ) -> Annotated[CallToolResult, ResearchOutput]:
        """Continue a research that a restart or crash interrupted, from its last saved step."""
        with _tool_errors():
            job = await jobs.resume(research_id, client=client_key(ctx))
        return await wait_and_answer(ctx, job, wait)

    @server.tool(annotations=ToolAnnotations(title="Web search", read_only_hint=True, open_world_hint=True,
                                             idempotent_hint=True))
    async def web_search(
        query: Annotated[str, Field(description="A few keywords; at most 400 characters.")],
        max_results: Annotated[int, Field(ge=1, le=20)] = 8,
        provider: Annotated[str | None, Field(description=(
            "One provider (duckduckgo, tavily, serper, brave, exa, searxng, openai, local); "
            "default: the server's configured providers, fused."))] = None,
        freshness: Freshness | None = None,
        region: Annotated[str | None, Field(max_length=16)] = None,
        page: Annotated[int, Field(ge=1, le=10)] = 1,
    ) -> SearchResultsOut:
        """Search the web: ranked results with title, URL, snippet and date. Fast and cheap; use
        read_page to read a result, deep_research for a cited report."""
        await _import("tools.search")
        from graph.settings import make_settings
        from tools.base import validate_request
        from tools.search import search_all

        with _tool_errors():
            settings = make_settings(**({"providers": [provider]} if provider else {}))
            req = validate_request(query=query, max_results=max_results, freshness=freshness, region=region,
                                   page=page)
            resp = await search_all(await providers_for(settings.providers, settings.corpus), req)
        return SearchResultsOut(results=[h.model_dump(exclude={"raw_content"}) for h in resp.results],
                                metadata=resp.metadata.model_dump(), warnings=resp.warnings)

    @server.tool(annotations=ToolAnnotations(title="Read page", read_only_hint=True, open_world_hint=True,
                                             idempotent_hint=True))
    async def read_page(
        url: Annotated[str, Field(description="An http(s) URL.", max_length=4096)],
        max_chars: Annotated[int, Field(ge=1, le=200_000)] = 8000,
        start_char: Annotated[int, Field(ge=0)] = 0,
    ) -> PageOut:
        """Read a web page or PDF as markdown, max_chars at a time; total_chars and next_start say
        how to read on."""
        await _import("tools.reader")
        from tools.reader import read_page as read

        with _tool_errors():
            page = await read(url, max_chars=max_chars, start_char=start_char)
        end = page.start_char + len(page.text)
        return PageOut(**page.model_dump(include=set(PageOut.model_fields) - {"next_start"}),
                       next_start=end if page.truncated else None)

    @server.resource("research://{research_id}", mime_type="application/json",
                     description="A research: its result (report, sources, stats) or its progress, as JSON.")
    async def research_json(research_id: str) -> str:
        return output_of(await _find(jobs, research_id)).model_dump_json(indent=1)

    @server.resource("research://{research_id}/report", mime_type="text/markdown",
                     description="A finished research's report as markdown.")
    async def research_report(research_id: str) -> str:
        out = output_of(await _find(jobs, research_id))
        return out.report or f"_Research {research_id} is {out.status}; no report yet._"

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(request: Any) -> Any:
        from starlette.responses import JSONResponse

        running = sum(1 for j in jobs.jobs.values() if not j.finished)
        return JSONResponse({"status": "stopping" if jobs.closing else "ok", "running": running},
                            status_code=503 if jobs.closing else 200)

    return server


async def _import(module: str) -> None:
    # heavy modules import in a thread: the event loop keeps serving other requests meanwhile (also
    # while the warm-up thread is halfway through the same import: `from x import y` would wait on it)
    import importlib

    await asyncio.to_thread(importlib.import_module, module)


async def _find(jobs: ResearchJobs, research_id: str) -> Job | ResearchRecord:
    try:
        return await jobs.lookup(research_id)
    except UnknownResearch:
        raise ResourceNotFoundError(f"no research {research_id!r}") from None


class _tool_errors:
    """Turn the errors a user can act on into tool errors with a clear message: no stack trace,
    no secret (our error types never carry one), and the server keeps serving."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: Any, e: BaseException | None, tb: Any) -> bool:
        if e is None or isinstance(e, ToolError | asyncio.CancelledError):
            return False
        from tools.base import ToolError as ProviderToolError

        if isinstance(e, AdmissionError):
            raise ToolError(e.message) from None
        if isinstance(e, UnknownResearch):
            raise ToolError(f"research_id: no research {e.args[0]!r}; the ids are listed as "
                            "research:// resources") from None
        if isinstance(e, SettingsError):
            raise ToolError(str(e)) from None
        if isinstance(e, ProviderToolError):
            who = f"{e.provider}: " if e.provider and not e.message.startswith(e.provider) else ""
            raise ToolError(f"{e.kind.value} error: {who}{e.message}") from None
        if type(e).__name__ == "LLMError":
            raise ToolError(f"model error: {e}") from None
        return False  # anything else is a bug: the SDK logs it and answers without its text


def output_of(found: Job | ResearchRecord) -> ResearchOutput:
    """One shape for finished and unfinished researches."""
    if isinstance(found, Job):
        rid, question, status, result = found.research_id, found.question, found.status, found.result
        error, elapsed = found.error, found.elapsed_s
        progress = found.progress
        result = result.model_dump() if result is not None else None
    else:
        rid, question, status, result, error = found.research_id, found.question, found.status, found.result, found.error
        progress, elapsed = found.progress or {}, round(found.updated_at - found.created_at, 1)
        if found.cancel_requested_at and not found.finished:
            error = f"cancel requested; the server running it ({found.owner}) stops it within seconds"
    if result and status in ("complete", "partial", "failed"):
        return ResearchOutput.model_validate({**result, "research_id": rid, "status": result["status"]})
    hint = {"interrupted": f"call resume_research(research_id={rid!r}) to continue from its last step",
            "queued": f"call research_status(research_id={rid!r}, wait_s=30) to follow it",
            "running": f"call research_status(research_id={rid!r}, wait_s=30) to collect the result"}
    return ResearchOutput(question=question, status=status, research_id=rid,
                          warnings=[error] if error else [], next_step=hint.get(status),
                          progress=Progress(stage=str(progress.get("stage", status)),
                                            message=str(progress.get("message", "")), elapsed_s=elapsed))


def answer(found: Job | ResearchRecord) -> CallToolResult:
    out = output_of(found)
    if out.report:
        text = out.report
    elif out.status == "failed" and out.warnings:
        text = f"The research failed: {out.warnings[0]}"
    else:
        text = (f"Research {out.research_id} is {out.status} ({out.progress.stage}: {out.progress.message}, "
                f"{out.progress.elapsed_s:.0f} s). Next: {out.next_step or 'nothing to do'}.")
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=out.model_dump(mode="json"),
                          is_error=out.status == "failed" and not out.report)


# -- HTTP: bearer token and Origin checks -------------------------------------------------------

class HttpGuard:
    """ASGI wrapper: a bearer token (constant-time compare) on every request but /healthz, and an
    Origin allow-list (browsers send Origin; a page on another site must not drive this server)."""

    def __init__(self, app: Any, tokens: list[str], origins: list[str]):
        self.app = app
        self.tokens = [t.encode() for t in tokens]
        self.origins = origins

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") == "/healthz":
            return await self.app(scope, receive, send)
        headers = {k.decode().lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        origin = headers.get("origin")
        if origin and not any(_origin_ok(origin, o) for o in self.origins):
            return await _refuse(send, 403, "origin not allowed")
        if self.tokens:
            given = headers.get("authorization", "").removeprefix("Bearer ").strip().encode()
            # compare against every token without stopping early: timing reveals nothing
            matches = [hmac.compare_digest(given, t) for t in self.tokens]
            if not any(matches):
                return await _refuse(send, 401, "missing or wrong bearer token")
            scope["deep_research.client"] = "token#" + hashlib.sha256(given).hexdigest()[:8]
        await self.app(scope, receive, send)


def _origin_ok(origin: str, pattern: str) -> bool:
    return origin == pattern or (pattern.endswith(":*") and re.fullmatch(
        re.escape(pattern[:-2]) + r"(:\d+)?", origin) is not None)


async def _refuse(send: Any, status: int, why: str) -> None:
    body = ('{"error": "%s"}' % why).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="deep-research"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- running --------------------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="deep-research-mcp", description="Deep research as an MCP server.")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--stateless", action="store_true",
                   help="no MCP sessions (load-balanced deployments); progress still streams per call")
    p.add_argument("--allowed-host", action="append", default=[],
                   help="extra Host header values to accept (e.g. research.example.com:*)")
    p.add_argument("--allowed-origin", action="append", default=[], help="extra browser Origins to accept")
    p.add_argument("--allow-remote-without-token", action="store_true",
                   help="listen on a non-loopback address without DEEP_RESEARCH_MCP_TOKEN (unsafe)")
    p.add_argument("--auto-resume", action=argparse.BooleanOptionalAction, default=None,
                   help="resume interrupted researches at startup (default: on for http, off for stdio)")
    p.add_argument("--workers", type=int, default=1,
                   help="HTTP server processes sharing the port (SO_REUSEPORT), each with its own event loop; "
                        "needs --stateless. The research cap and queue are split between them")
    p.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set for a worker
    p.add_argument("--debug", action="store_true", help="verbose logs on stderr (secrets redacted)")
    return p.parse_args(argv)


class _Redact(logging.Filter):
    """Mask known secrets in every log line, whatever logged them."""

    def __init__(self) -> None:
        super().__init__()
        names = re.compile(r"(API_KEY|TOKEN|SECRET|PASSWORD|DATABASE_URL)$")
        self.secrets = [v for k, v in os.environ.items() if names.search(k) and len(v) >= 6]

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if any(s in msg for s in self.secrets):
            for s in self.secrets:
                msg = msg.replace(s, "***")
            record.msg, record.args = msg, None
        return True


def setup_logging(debug: bool) -> None:
    level = "DEBUG" if debug else os.environ.get("DEEP_RESEARCH_LOG_LEVEL", "INFO").upper()
    handler = logging.StreamHandler(sys.stderr)  # never stdout: on stdio it is the protocol
    handler.addFilter(_Redact())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    if not debug:
        for noisy in ("httpx", "httpx2", "httpcore", "mcp", "uvicorn.access"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop the server runs on (None: asyncio's own). uvloop's loop, written in C, spends less
    per callback and per socket event. Under the 100-call load (gate off, before the heap freeze),
    time between steps over 4-5 interleaved runs each: uvloop 12-19 ms, asyncio 10-52 ms (median 16
    vs 27)."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            from graph.settings import SettingsError

            raise SettingsError("DEEP_RESEARCH_EVENT_LOOP=uvloop, but uvloop is not installed (it has no "
                                "Windows build); set DEEP_RESEARCH_EVENT_LOOP=asyncio or auto") from None
        return None
    return uvloop.new_event_loop


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `deep-research-mcp` and `deep-research serve`; returns an exit code."""
    args = parse_args(argv)
    setup_logging(args.debug)
    try:
        config = ServerSettings()
    except ValidationError as e:
        print(f"deep-research-mcp: {describe_validation_error(e)}", file=sys.stderr)
        return 2
    tokens = [t.strip() for t in (config.mcp_token.get_secret_value() if config.mcp_token else "").split(",")
              if t.strip()]
    if args.transport == "http" and not _is_loopback(args.host) and not tokens \
            and not args.allow_remote_without_token:
        print(f"deep-research-mcp: refusing to listen on {args.host} without a token: set "
              "DEEP_RESEARCH_MCP_TOKEN, or pass --allow-remote-without-token if a proxy in front "
              "authenticates", file=sys.stderr)
        return 2
    # our stderr handler is in place; the SDK's own logging setup would only import rich (~50 ms of
    # the cold start a client waits through)
    import mcp.server.mcpserver.server as sdk

    sdk.configure_logging = lambda *a, **k: None
    from graph.settings import SettingsError

    try:  # before any worker starts: each would fail on it the same way
        loop_factory = event_loop_factory(config.event_loop)
    except SettingsError as e:
        print(f"deep-research-mcp: {e}", file=sys.stderr)
        return 2
    if args.workers != 1:
        problem = _workers_problem(args)
        if problem:
            print(f"deep-research-mcp: {problem}", file=sys.stderr)
            return 2
        return _supervise(args, list(sys.argv[1:] if argv is None else argv), config)
    auto = args.auto_resume if args.auto_resume is not None else config.auto_resume
    auto = (args.transport == "http") if auto is None else auto
    if args.transport == "http":
        os.environ.setdefault("DEEP_RESEARCH_EXTRACT_PROCESSES", str(_extract_processes(1)))
    runner = _serve_http(args, config, tokens, auto) if args.transport == "http" else _serve_stdio(config, auto)
    try:
        with asyncio.Runner(loop_factory=loop_factory) as r:
            return r.run(runner)
    except SettingsError as e:  # found while opening the store: a setting the user fixes
        print(f"deep-research-mcp: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


async def _serve_stdio(config: ServerSettings, auto_resume: bool) -> int:
    jobs, stack = await open_jobs(config, auto_resume=auto_resume)
    server = create_server(jobs)
    if config.warm_up:
        jobs.warm_up()
    _on_signals(lambda: asyncio.ensure_future(_stop_stdio(stack)))
    try:
        await server.run_stdio_async()  # returns when the client closes stdin
    finally:
        await stack.aclose()
    return 0


async def _stop_stdio(stack: Any) -> None:
    # the SDK reads stdin in a worker thread that no cancellation can interrupt: once researches
    # are stopped and the records written, leave without waiting for the client to close stdin
    await stack.aclose()
    logging.shutdown()
    os._exit(0)


def _on_signals(first: Any) -> None:
    """First SIGTERM/SIGINT: graceful stop. Second: exit at once."""
    loop = asyncio.get_running_loop()
    state = {"seen": False}

    def handle(sig: int) -> None:
        if state["seen"]:
            os._exit(128 + sig)
        state["seen"] = True
        log.info("received %s: stopping (send it again to exit at once)", signal.Signals(sig).name)
        first()

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, handle, sig)
        except (NotImplementedError, RuntimeError):  # Windows: default handlers stay
            pass


async def _serve_http(args: argparse.Namespace, config: ServerSettings, tokens: list[str],
                      auto_resume: bool) -> int:
    import contextlib

    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Mount

    jobs, stack = await open_jobs(config, auto_resume=auto_resume)
    server = create_server(jobs)
    if config.warm_up:
        jobs.warm_up()
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", *args.allowed_host]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", *args.allowed_origin]
    remote = not _is_loopback(args.host)
    if remote and not args.allowed_host:
        log.warning("listening on %s without --allowed-host: the Host header is not checked", args.host)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=not remote or bool(args.allowed_host),
                                         allowed_hosts=hosts, allowed_origins=origins)
    mcp_app = server.streamable_http_app(stateless_http=args.stateless, transport_security=security,
                                         host=args.host)

    @contextlib.asynccontextmanager
    async def lifespan(_: Any):
        async with server.session_manager.run():
            yield
        await stack.aclose()

    app = HttpGuard(Starlette(routes=[Mount("/", app=mcp_app)], lifespan=lifespan), tokens, origins)

    loop = asyncio.get_running_loop()

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # uvicorn's own handler re-raises the signal after a clean stop (exit status -15) and
            # ignores a second SIGTERM; we exit 0 after a graceful stop and at once on a second signal
            if self.should_exit:
                os._exit(128 + sig)
            log.info("received %s: stopping (send it again to exit at once)", signal.Signals(sig).name)
            self.should_exit = True
            # stop researches first, so open tool calls answer and their streams close
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(jobs.shutdown()))

    uv = Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                               timeout_graceful_shutdown=int(config.shutdown_grace_s) + 2, lifespan="on"))
    loop_name = "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
    log.info("serving MCP on http://%s:%d/mcp%s (event loop: %s)", args.host, args.port,
             " (token required)" if tokens else "", loop_name)
    if args.reuse_port:
        asyncio.ensure_future(_stop_with_supervisor(os.getppid()))
    await uv.serve(sockets=[_listen(args.host, args.port, reuse_port=True)] if args.reuse_port else None)
    return 0


# -- several worker processes on one port ------------------------------------------------------------
# One process runs every research on one event loop, and past some CPU use each step waits for that
# loop (graph/cpu_gate.py holds new researches back then). Workers add loops: each is a replica (its
# own registry, leases in the shared store) that the kernel hands connections to.

async def _stop_with_supervisor(supervisor: int) -> None:
    """A worker whose supervisor is gone (killed: it could not pass a signal on) stops as if told to."""
    while os.getppid() == supervisor:
        await asyncio.sleep(1.0)
    log.warning("the supervisor (pid %d) is gone: stopping", supervisor)
    os.kill(os.getpid(), signal.SIGTERM)


def _extract_processes(workers: int) -> int:
    """Page-extraction processes per HTTP server process by default: many researches share one event
    loop, so extraction leaves it for other cores (one per core up to 4, shared by the workers); a
    single-core machine keeps it in a thread."""
    cores = os.cpu_count() or 1
    return max(1, min(4, cores) // workers) if cores >= 2 else 0


def _workers_problem(args: argparse.Namespace) -> str | None:
    if args.workers < 1:
        return f"--workers {args.workers}: give 1 or more"
    if args.transport != "http":
        return "--workers needs --transport http (a stdio server talks to one client)"
    if not args.stateless:
        return ("--workers needs --stateless: an MCP session lives in one process, and a client's next "
                "request may reach another")
    if not hasattr(socket, "SO_REUSEPORT"):
        return "--workers needs SO_REUSEPORT, which this platform lacks; run one server per port behind a proxy"
    return None


def _listen(host: str, port: int, *, reuse_port: bool, backlog: int = 2048) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if backlog:
        sock.listen(backlog)
    return sock


def _worker_argv(argv: list[str], port: int) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--workers", "--port"):
            skip = True
        elif not a.startswith(("--workers=", "--port=")):
            out.append(a)
    return [*out, "--port", str(port), "--workers", "1", "--reuse-port"]


def _supervise(args: argparse.Namespace, argv: list[str], config: ServerSettings) -> int:
    """Run `args.workers` servers on one port; forward stop signals; restart a worker that dies."""
    import math
    import subprocess
    import time

    n = args.workers
    # holds the port while the supervisor lives (bound, not listening: it takes no connections), so a
    # restarting worker finds it free of strangers
    try:
        holder = _listen(args.host, args.port, reuse_port=True, backlog=0)
    except OSError as e:
        print(f"deep-research-mcp: cannot use {args.host}:{args.port} ({e.strerror}); is another server on "
              "it? Choose another --port", file=sys.stderr)
        return 2
    port = holder.getsockname()[1]
    env = {**os.environ,
           "DEEP_RESEARCH_MAX_CONCURRENT_RESEARCHES": str(math.ceil(config.max_concurrent_researches / n)),
           "DEEP_RESEARCH_QUEUE_SIZE": str(math.ceil(config.queue_size / n))}
    env.setdefault("DEEP_RESEARCH_EXTRACT_PROCESSES", str(_extract_processes(n)))
    # this file, not `-m server`: a server.py in the current directory must not be picked up instead
    cmd = [sys.executable, os.path.abspath(__file__), *_worker_argv(argv, port)]
    stopping: list[int] = []
    procs: list[subprocess.Popen] = []

    def on_signal(sig: int, _frame: Any) -> None:
        stopping.append(sig)
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)  # a second signal makes each worker exit at once, as it does alone

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # their own session: a terminal's Ctrl-C reaches the supervisor, which passes one signal on
    procs += [subprocess.Popen(cmd, env=env, start_new_session=True) for _ in range(n)]
    log.info("%d workers serving MCP on http://%s:%d/mcp (pids %s)", n, args.host, port,
             ", ".join(str(p.pid) for p in procs))
    started = [time.monotonic()] * n
    quick_exits = 0  # workers that died within 10 s of starting, in a row: a broken setup, not bad luck
    while not stopping and quick_exits < 3:
        for i, p in enumerate(procs):
            if p.poll() is not None and not stopping:
                quick_exits = quick_exits + 1 if time.monotonic() - started[i] < 10 else 0
                log.warning("worker %d exited with %s; starting another (it resumes what that one ran)",
                            p.pid, p.returncode)
                procs[i], started[i] = subprocess.Popen(cmd, env=env, start_new_session=True), time.monotonic()
        time.sleep(0.5)
    if not stopping:
        log.error("workers keep exiting right after they start; stopping (see their errors above)")
        on_signal(signal.SIGTERM, None)
    deadline = time.monotonic() + config.shutdown_grace_s + 5
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
    holder.close()
    return 1 if quick_exits >= 3 else 0


if __name__ == "__main__":
    sys.exit(main())
