"""Helpers for the MCP server tests: an in-memory server with offline models, server subprocesses."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import ServerProcess
from graph.jobs import ServerSettings, open_jobs
from graph.testing import ResearchResponder, ScriptedChatModel, sample_corpus_dir
from tools.providers.local import LocalProvider

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Do heat pumps work in cold climates, and what do they cost to run?"


class OfflineModels:
    """`prepare` hook for ResearchJobs: every research gets a scripted model and the sample corpus.
    Keeps the models it handed out so tests can count the calls they received."""

    def __init__(self, latency_s: float = 0.0, sufficient: bool | int = True):
        self.latency_s = latency_s
        self.sufficient = sufficient
        self.models: list[ScriptedChatModel] = []
        self._provider = LocalProvider.from_folder(sample_corpus_dir())

    def __call__(self, settings: Any) -> Any:
        model = ScriptedChatModel(latency_s=self.latency_s, responder=ResearchResponder(sufficient=self.sufficient))
        self.models.append(model)
        return settings.with_chat_model(model).with_search_providers([self._provider])

    def calls(self) -> list[dict]:
        return [c for m in self.models for c in m.calls]


@contextlib.asynccontextmanager
async def memory_server(models: OfflineModels | None = None, **config: Any) -> AsyncIterator[Any]:
    """An in-process server over a fresh registry in the current data dir; shut down on exit."""
    import server

    jobs, stack = await open_jobs(ServerSettings(**{"warm_up": False, **config}), prepare=models or OfflineModels())
    try:
        yield server.create_server(jobs)
    finally:
        await stack.aclose()


def server_env(llm_base_url: str, data_dir: Path | str, **extra: str) -> dict[str, str]:
    """Environment for a fully offline server subprocess: local LLM endpoint, local corpus."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEEP_RESEARCH_", "OPENAI_", "TAVILY_"))}
    env.update({"OPENAI_BASE_URL": llm_base_url, "OPENAI_API_KEY": "sk-test-not-a-real-key",
                "DEEP_RESEARCH_MODEL": "fake-model", "DEEP_RESEARCH_PROVIDERS": "local",
                "DEEP_RESEARCH_CORPUS": str(sample_corpus_dir()), "DEEP_RESEARCH_DATA_DIR": str(data_dir),
                "DEEP_RESEARCH_WARM_UP": "false", "PYTHONUNBUFFERED": "1", **extra})
    return env


@contextlib.contextmanager
def http_server(env: dict[str, str], *args: str, port: int | None = None,
                log: Path | None = None) -> Iterator[tuple[subprocess.Popen, str]]:
    """`python server.py --transport http` on a free port; yields (process, base URL) once /healthz answers."""
    with ServerProcess(env, log, *args, port=port) as srv:
        yield srv.proc, srv.url


