"""Stopping the CLI mid-research: SIGTERM saves, exits in time, and the research resumes without
redoing finished steps (issue: clean shutdown)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graph.testing import sample_corpus_dir
from tests.fakes.openai_server import FakeOpenAI
from graph.testing import ResearchResponder

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_sigterm_stops_in_time_and_the_research_resumes(tmp_path):
    llm = FakeOpenAI(latency_s=0.3, responder=ResearchResponder(sufficient=False)).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DEEP_RESEARCH_"))}
    env.update({"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "not-real", "DEEP_RESEARCH_MODEL": "fake-model",
                "DEEP_RESEARCH_DATA_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1"})
    try:
        proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "Do heat pumps work in cold climates?",
                                 "--corpus", str(sample_corpus_dir()), "--rounds", "3", "--pages", "1", "--json"],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # wait until the first round's evidence is being extracted: plan and searches are saved by then
        deadline = time.time() + 30
        while time.time() < deadline and not any(c["schema"] == "Extraction" for c in llm.calls):
            time.sleep(0.05)
        assert any(c["schema"] == "Extraction" for c in llm.calls), "the research never got going"
        time.sleep(0.2)
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
        assert time.time() - t0 < 10, "did not exit within 10 s of SIGTERM"
        assert proc.returncode == 130, err
        partial = json.loads(out)
        assert partial["status"] in ("partial", "failed") and partial["stop_reason"] == "cancelled"
        rid = partial["research_id"]
        assert f"deep-research resume {rid}" in err

        plans_before = sum(c["schema"] == "Plan" for c in llm.calls)
        done = subprocess.run([sys.executable, str(ROOT / "cli.py"), "resume", rid, "--json"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["status"] == "complete" and result["stats"]["rounds"] == 3 and "[1]" in result["report"]
        # the plan step had finished before the signal: resuming did not plan again
        assert sum(c["schema"] == "Plan" for c in llm.calls) == plans_before == 1
    finally:
        llm.stop()
