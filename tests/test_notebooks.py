"""The notebooks run top to bottom, offline, in a kernel on this project's interpreter.

A failing cell fails the test: nbclient raises CellExecutionError naming the cell and its traceback.
The kernel gets an environment without model keys or provider keys and with
DEEP_RESEARCH_NOTEBOOK_OFFLINE=1, plus a model endpoint that refuses connections: a notebook that
ignored the offline switch would fail here at once instead of reaching a network.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

from tests.fakes.search_apis import API_KEY, shared_fake_web

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAMES = ["quickstart.ipynb", "providers.ipynb"]
KERNEL = "deep-research-test"
MAX_SECONDS = 30  # per notebook, kernel start included

# variables that would switch a notebook online, point it at real services, or change its settings
VENDOR_VARS = {"OPENAI_API_KEY", "OPENAI_BASE_URL", "TAVILY_API_KEY", "SERPER_API_KEY", "BRAVE_API_KEY",
               "BRAVE_SEARCH_API_KEY", "EXA_API_KEY", "SEARXNG_URL"}


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory) -> Path:
    """A kernelspec that starts ipykernel with this very interpreter (the project's venv under
    `uv run`), so the notebooks never run in whatever `python` a PATH or a user kernelspec offers."""
    root = tmp_path_factory.mktemp("kernels")
    spec = root / KERNEL
    spec.mkdir()
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "deep-research (test)", "language": "python"}))
    return root


def offline_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in VENDOR_VARS and not k.startswith("DEEP_RESEARCH_")}
    env.update({
        "DEEP_RESEARCH_NOTEBOOK_OFFLINE": "1",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",  # discard port: refused if the switch were ignored
        "DEEP_RESEARCH_DATA_DIR": str(tmp / "data"),  # caches and checkpoints stay in the test's folder
        "IPYTHONDIR": str(tmp / "ipython"),  # no user startup files or profiles
        "PYTHONUNBUFFERED": "1",
    })
    return env


def outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif "data" in out:
            parts.append(out["data"].get("text/markdown") or out["data"].get("text/plain", ""))
    return "\n".join(parts)


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_is_clean(name: str):
    """Committed notebooks are valid, output-free and name the standard python3 kernel."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, f"{name} has no code cells"
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{name}: cells {dirty} hold outputs; strip them before committing"
    assert nb.metadata["kernelspec"]["name"] == "python3"


async def execute(name: str, kernel_dir: Path, env: dict[str, str]) -> tuple[str, float]:
    """Run a notebook top to bottom; return its outputs as text and the seconds it took."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    # a probe cell (in memory only) proves which interpreter the kernel runs
    probe = nbformat.v4.new_code_cell("import sys; print(sys.prefix)")
    nb.cells.insert(0, probe)
    km = AsyncKernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]))
    client = NotebookClient(nb, km=km, timeout=60, kernel_name=KERNEL,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    t0 = time.perf_counter()
    await client.async_execute(env=env)
    elapsed = time.perf_counter() - t0

    assert outputs_text(probe).strip() == sys.prefix, "the kernel runs another interpreter than the tests"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "some cells did not run"
    return "\n".join(outputs_text(c) for c in code), elapsed


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
async def test_notebook_runs_offline(name: str, kernel_dir: Path, tmp_path: Path):
    text, elapsed = await execute(name, kernel_dir, offline_env(tmp_path))
    assert "OFFLINE mode" in text and "ONLINE mode" not in text
    assert elapsed < MAX_SECONDS, f"{name} took {elapsed:.1f} s; keep notebooks under {MAX_SECONDS} s in CI"


@pytest.mark.slow
async def test_providers_notebook_uses_configured_web_providers(kernel_dir: Path, tmp_path: Path):
    """With keys set and no offline switch, the web cells run: each provider alone, then fused with
    the local documents. The providers answer from the fake APIs on 127.0.0.1, never the internet."""
    web = shared_fake_web()
    env = offline_env(tmp_path)
    del env["DEEP_RESEARCH_NOTEBOOK_OFFLINE"]
    env.update({"DEEP_RESEARCH_PROVIDERS": "tavily,serper",  # keeps keyless DuckDuckGo out: no internet
                "TAVILY_API_KEY": API_KEY, "TAVILY_BASE_URL": f"{web.url}/tavily",
                "SERPER_API_KEY": API_KEY, "SERPER_BASE_URL": f"{web.url}/serper"})
    text, _ = await execute("providers.ipynb", kernel_dir, env)

    assert "ONLINE mode: web providers tavily, serper" in text
    assert "skipped: not in DEEP_RESEARCH_PROVIDERS" in text  # duckduckgo, which needs no key
    for provider in ("tavily", "serper"):  # each alone: a table of five hits
        assert re.search(rf"^{provider}: 5( of \d+)? results", text, re.M), f"no results from {provider}"
    assert "local+tavily+serper:" in text  # the fused listing of every provider
    assert web.count("/tavily/search") >= 1 and web.count("/serper/search") >= 1
