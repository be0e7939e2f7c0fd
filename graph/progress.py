"""Stage progress events, written to LangGraph's custom stream.

Every surface reads the same events: the MCP server turns them into progress notifications, the
CLI into its live display, Studio shows them as custom events. Outside a graph run they are dropped.
"""

from __future__ import annotations

import time
from typing import Any

from langgraph.config import get_stream_writer

STAGES = ("planning", "searching", "reading", "reflecting", "extracting", "writing", "done")


def emit(stage: str, message: str, **fields: Any) -> None:
    """Send one progress event: {"stage", "message", "ts", ...fields}."""
    try:
        writer = get_stream_writer()
    except RuntimeError:  # called outside a graph run (a node tested on its own)
        return
    writer({"stage": stage, "message": message, "ts": time.time(), **fields})
