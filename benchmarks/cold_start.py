"""Cold start: from spawning the MCP server over stdio to the answer to `tools/list`.

MCP clients (Claude Desktop, Claude Code, Cursor, VS Code) spawn the server when a session starts
and list its tools before anything else, so this is the wait a user sees. The clock starts just
before the process is spawned and stops when the `tools/list` response line arrives on stdout; the
handshake (initialize, initialized) is sent at once, as a client does. Median of N runs.

    uv run python benchmarks/cold_start.py [--runs 10] [--target 0.8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import environment, print_table, write_json  # noqa: E402

HANDSHAKE = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "cold-start-bench", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def one_run(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Seconds to the initialize answer and to the tools/list answer, for one fresh process."""
    payload = "".join(json.dumps(m) + "\n" for m in HANDSHAKE).encode()
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env, cwd=ROOT)
    try:
        proc.stdin.write(payload)
        proc.stdin.flush()
        times: dict[str, float] = {}
        tools = 0
        while "tools_list_s" not in times:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the server exited (code {proc.poll()}) before answering tools/list")
            msg = json.loads(line)
            if msg.get("id") == 1:
                times["initialize_s"] = time.perf_counter() - t0
            elif msg.get("id") == 2:
                times["tools_list_s"] = time.perf_counter() - t0
                tools = len(msg["result"]["tools"])
        times["tools"] = tools
        return times
    finally:
        proc.stdin.close()
        proc.terminate()
        proc.wait(timeout=15)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--target", type=float, default=0.8, help="seconds; exit 1 when the median is slower")
    p.add_argument("--no-json", action="store_true")
    args = p.parse_args(argv)

    env = {**os.environ, "DEEP_RESEARCH_DATA_DIR": tempfile.mkdtemp(prefix="cold-start-"),
           "PYTHONDONTWRITEBYTECODE": "0"}
    command = [sys.executable, str(ROOT / "server.py")]
    one_run(command, env)  # warm the OS file cache and .pyc files, as on any machine after the first start
    runs = [one_run(command, env) for _ in range(args.runs)]
    row = {"runs": len(runs),
           "initialize_median_s": statistics.median(r["initialize_s"] for r in runs),
           "tools_list_median_s": statistics.median(r["tools_list_s"] for r in runs),
           "tools_list_min_s": min(r["tools_list_s"] for r in runs),
           "tools_list_max_s": max(r["tools_list_s"] for r in runs),
           "tools": runs[0]["tools"], "target_s": args.target}
    row["meets_target"] = row["tools_list_median_s"] <= args.target
    print_table([row], [("runs", "runs"), ("initialize_median_s", "initialize (median s)"),
                        ("tools_list_median_s", "tools/list (median s)"), ("tools_list_min_s", "min s"),
                        ("tools_list_max_s", "max s"), ("tools", "tools"), ("target_s", "target s"),
                        ("meets_target", "meets target")],
                title="Cold start over stdio: spawn -> tools/list answer")
    if not args.no_json:
        path = write_json("cold_start", {"summary": row, "runs": runs, "command": command,
                                         "environment": environment()})
        print(f"\nwrote {path.relative_to(ROOT)}")
    return 0 if row["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
