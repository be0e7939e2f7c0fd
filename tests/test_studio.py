"""LangGraph Studio / Server: `langgraph dev` serves langgraph.json's graph to a real SDK client.

One `langgraph dev` subprocess (the in-memory LangGraph API server, exactly what Studio talks to)
runs the graph fully offline: the model is a real OpenAI-compatible server on 127.0.0.1 (the
reference instrument's fakellm.py) and search is the local provider over the shipped sample corpus.
The test drives it like Studio does, with langgraph-sdk: schemas, a thread, a streamed run with
progress events, the final state. It runs without --allow-blocking, so a node that blocks the event
loop fails here (the API server's blockbuster check) before it slows a real deployment down.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from benchmarks.common import free_port
from graph.state import ResearchResult

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DEEP_RESEARCH_SHARED", ROOT.parent / "shared"))
FAKELLM = SHARED / "bench" / "fakellm.py"
LANGGRAPH = Path(sys.executable).parent / "langgraph"
CORPUS = ROOT / "graph" / "sample_corpus"
GRAPH_ID = "deep_research"
STARTUP_S = 60  # a cold start imports langgraph-api, the graph and its tools: ~5 s here, slower in CI
ANSI = re.compile(r"\x1b\[[0-9;]*m")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not FAKELLM.is_file(), reason=f"reference instrument not found at {FAKELLM}"),
    pytest.mark.skipif(not LANGGRAPH.is_file(), reason="langgraph-cli[inmem] is not installed (dev group)"),
]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="module")
def fake_llm(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """fakellm.py on a free port: (base_url, call log). It answers json_schema requests with an
    instance of the schema, which is the first method our structured output tries."""
    log = tmp_path_factory.mktemp("fakellm") / "calls.jsonl"
    proc = subprocess.Popen([sys.executable, str(FAKELLM), "--port", "0", "--log", str(log),
                             "--latency", "0", "--sufficient", "false"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("PORT "), f"fakellm did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1", log
    finally:
        stop(proc)
        proc.stdout.close()


@dataclass
class Studio:
    url: str
    log: Path


@pytest.fixture(scope="module")
def studio(fake_llm, tmp_path_factory) -> Iterator[Studio]:
    """`langgraph dev` on langgraph.json, repo root as cwd; yields once /ok answers."""
    base_url, _ = fake_llm
    out = tmp_path_factory.mktemp("studio") / "langgraph-dev.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DEEP_RESEARCH_", "LANGSMITH_"))}
    env.update({
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "LANGSMITH_TRACING": "false",
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "not-a-real-key",
        "DEEP_RESEARCH_PROVIDERS": "local",
        "DEEP_RESEARCH_CORPUS": str(CORPUS),
        "DEEP_RESEARCH_DATA_DIR": str(tmp_path_factory.mktemp("data")),
    })
    # --no-reload: other edits in the working tree must not restart the server mid-run
    cmd = [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
           "--port", str(free_port()), "--config", str(ROOT / "langgraph.json")]
    with open(out, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        yield Studio(wait_until_up(proc, out), out)
    finally:
        stop(proc)


def wait_until_up(proc: subprocess.Popen, log: Path) -> str:
    """The URL the server reports (it silently takes another port when ours is busy), once /ok."""
    deadline = time.monotonic() + STARTUP_S
    url = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"langgraph dev exited with {proc.returncode}:\n{tail(log)}")
        if url is None:
            m = re.search(r"API:\s*(http://127\.0\.0\.1:\d+)", ANSI.sub("", log.read_text(errors="replace")))
            url = m.group(1) if m else None
        if url is not None:
            try:
                if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
        time.sleep(0.25)
    pytest.fail(f"langgraph dev did not answer /ok within {STARTUP_S} s:\n{tail(log)}")


def tail(log: Path, lines: int = 40) -> str:
    return "\n".join(ANSI.sub("", log.read_text(errors="replace")).splitlines()[-lines:])


async def test_studio_shows_the_graph_with_its_settings(studio):
    from langgraph_sdk import get_client

    client = get_client(url=studio.url)
    assistants = await client.assistants.search(graph_id=GRAPH_ID)
    assert assistants, "langgraph.json's graph is not registered"
    schemas = await client.assistants.get_schemas(assistants[0]["assistant_id"])
    context = schemas["context_schema"]["properties"]
    # ResearchSettings is the context schema: Studio's configuration panel shows these fields
    for field in ("depth", "breadth", "max_rounds", "providers", "corpus", "report_length", "base_url"):
        assert field in context, f"context schema lacks {field}"
    assert context["depth"]["enum"] == ["quick", "standard", "deep"]
    assert "question" in schemas["input_schema"]["properties"]


async def test_studio_streams_a_run_and_keeps_the_result_in_thread_state(studio, fake_llm):
    from langgraph_sdk import get_client

    _, llm_log = fake_llm
    llm_log.write_text("")
    client = get_client(url=studio.url)
    thread = await client.threads.create()
    question = "Do heat pumps work in cold climates, and what do they cost to run?"
    # context is plain JSON here, as Studio sends it; the graph coerces it into ResearchSettings
    context = {"depth": "quick", "breadth": 2, "report_length": "concise"}

    modes: dict[str, int] = {}
    stages: list[str] = []
    nodes: set[str] = set()
    async for part in client.runs.stream(thread["thread_id"], GRAPH_ID, input={"question": question},
                                         context=context, stream_mode=["updates", "custom"]):
        modes[part.event] = modes.get(part.event, 0) + 1
        if part.event == "error":
            pytest.fail(f"the run failed on the server: {part.data}\n{tail(studio.log)}")
        if part.event == "custom":
            assert {"stage", "message", "ts"} <= set(part.data), part.data
            stages.append(part.data["stage"])
        elif part.event == "updates":
            nodes.update(part.data)

    assert modes.get("custom") and modes.get("updates"), modes
    assert stages[0] == "planning" and stages[-1] == "done", stages
    assert {"searching", "writing"} <= set(stages), stages
    assert {"plan", "search", "synthesize"} <= nodes, nodes

    state = await client.threads.get_state(thread["thread_id"])
    assert not state["next"], "the run stopped before the end"
    result = ResearchResult.model_validate(state["values"]["result"])
    assert result.status == "complete"
    assert result.question == question
    # the context reached the nodes: breadth 2 and one round (quick) instead of the defaults
    assert [q.round for q in result.sub_queries] == [1, 1]
    assert result.stats.rounds == 1
    # every source is a document of the sample corpus, and every marker in the report resolves
    assert result.sources and all(s.url.startswith("local://") for s in result.sources)
    ids = {s.id for s in result.sources}
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", result.report)}
    assert cited and cited <= ids, (cited, ids)
    # the stats count the calls the model server actually answered
    calls = [json.loads(line) for line in llm_log.read_text().splitlines() if line.strip()]
    assert result.stats.llm_calls == len(calls) > 0
