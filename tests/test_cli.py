"""The command line as a user runs it: a real subprocess, exit codes, stdout vs stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("OPENAI_", "DEEP_RESEARCH_API", "DEEP_RESEARCH_MODEL", "DEEP_RESEARCH_PROVIDERS"))}
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**base, **(env or {})})


@pytest.fixture(scope="module")
def demo_json(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("cli") / "result.json"
    proc = cli("--demo", "Do heat pumps work in cold climates?", "--depth", "quick", "--json", "--out", str(out),
               env={"DEEP_RESEARCH_DATA_DIR": str(out.parent)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == json.loads(proc.stdout)
    return {"result": json.loads(proc.stdout), "stderr": proc.stderr}


def test_demo_research_prints_a_cited_report(demo_json):
    result = demo_json["result"]
    assert result["status"] == "complete" and result["stats"]["rounds"] == 1
    assert "[1]" in result["report"] and "## Sources" in result["report"]
    # progress went to stderr, in stage order
    err = demo_json["stderr"]
    stages = [err.index(s) for s in ("Planning", "Searching", "Reading", "Writing", "complete")]
    assert stages == sorted(stages)


def test_resume_of_a_finished_research_returns_its_result(demo_json, tmp_path):
    rid = demo_json["result"]["research_id"]
    data_dir = None
    for line in demo_json["stderr"].splitlines():
        if "Wrote" in line:
            data_dir = str(Path(line.split("Wrote", 1)[1].strip()).parent)
    proc = cli("resume", rid, "--json", env={"DEEP_RESEARCH_DATA_DIR": data_dir})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["report"] == demo_json["result"]["report"]
    proc = cli("resume", "nope", env={"DEEP_RESEARCH_DATA_DIR": data_dir})
    assert proc.returncode == 2 and "no saved research 'nope'" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--demo", "   "], "question: it is empty"),
    (["--demo", "q", "--depth", "huge"], "depth: got 'huge'"),
    (["--demo", "q", "--rounds", "-1"], "max_rounds"),
    (["search", "x" * 500, "--corpus", "graph/sample_corpus"], "limit is 400"),
    (["search", "q", "--provider", "nosuch"], "nosuch"),
    (["read", "http://127.0.0.1:9/secret"], "127.0.0.1"),
])
def test_bad_input_is_one_clear_line_with_exit_code_2(args, message, tmp_path):
    proc = cli(*args, env={"DEEP_RESEARCH_DATA_DIR": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_no_model_configured_names_the_variables(tmp_path):
    # nothing listens on the Ollama port in CI; if a developer runs Ollama this case cannot occur
    import socket

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 11434)) == 0:
            pytest.skip("an Ollama server is running here, so the CLI would use it")
    proc = cli("What is a heat pump?", env={"DEEP_RESEARCH_DATA_DIR": str(tmp_path)})
    assert proc.returncode == 2
    assert "OPENAI_API_KEY" in proc.stderr and "OPENAI_BASE_URL" in proc.stderr and "ollama" in proc.stderr.lower()


def test_search_over_a_local_corpus():
    proc = cli("search", "refrigerant propane", "--corpus", "graph/sample_corpus", "--json", "-n", "2")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["metadata"]["provider"] == "local" and len(data["results"]) == 2
    assert data["results"][0]["url"].endswith("emissions.md") and "raw_content" not in data["results"][0]
