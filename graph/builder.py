"""The research graph: plan -> search (fan-out) -> extract + reflect -> decide -> synthesize.

    plan ──Send×N──> search ─> gather ──Send×N──> extract ─┐
                       ^                 └──────> reflect ─┴─> decide ──> synthesize
                       └────────────Send×N (next round)──────────┘

`graph` (no checkpointer) is what langgraph.json serves: LangGraph Server and Studio supply their
own persistence. The MCP server and the CLI call `compile_graph(checkpointer=...)`.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from graph.nodes.decide import after_decide, after_search, decide, fan_out, gather
from graph.nodes.extract import extract
from graph.nodes.plan import plan
from graph.nodes.reflect import reflect
from graph.nodes.search import search
from graph.nodes.synthesize import synthesize
from graph.settings import ResearchSettings
from graph.state import ResearchState
from graph.step_clock import timed


def build_graph() -> StateGraph:
    g = StateGraph(ResearchState, context_schema=ResearchSettings)
    # nodes are timed (graph/step_clock.py)
    g.add_node("plan", timed(plan))
    g.add_node("search", timed(search))
    g.add_node("gather", timed(gather))
    g.add_node("extract", timed(extract))
    g.add_node("reflect", timed(reflect))
    g.add_node("decide", timed(decide))
    g.add_node("synthesize", timed(synthesize))
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan_out, ["search", "gather"])
    g.add_edge("search", "gather")
    g.add_conditional_edges("gather", after_search, ["extract", "reflect", "decide"])
    g.add_edge("extract", "decide")
    g.add_edge("reflect", "decide")
    g.add_conditional_edges("decide", after_decide, ["search", "gather", "synthesize"])
    g.add_edge("synthesize", END)
    return g


def compile_graph(checkpointer=None, **kwargs):
    """The compiled research graph; pass a checkpointer for durable, resumable runs."""
    return build_graph().compile(checkpointer=checkpointer, name="deep_research", **kwargs)


graph = compile_graph()
