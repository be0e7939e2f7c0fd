"""Offline runs: a scripted chat model and a small shipped corpus, for tests, notebooks and demos.

ScriptedChatModel is a real LangChain BaseChatModel: it supports bind_tools (answers with tool
calls), with_structured_output for the json_schema and function_calling methods, plain text, token
usage and a per-call latency. Its default responder reads the prompts the graph sends (the
<source id=...> blocks, the evidence lines) and answers in kind, so whole runs produce a cited
report without a network. Tests can queue exact replies or make a method fail on purpose.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field

SAMPLE_CORPUS = Path(__file__).parent / "sample_corpus"
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9-]{2,}")
_STOP = set("""the and for with that this from what which when where who how why does did are was were
have has had not but can could should would will into about their there them they than also only very
more most such some any each other over under between after before during question answer
your you its it's is of in on to a an as by or be at""".split())
Responder = Callable[[list[BaseMessage], "str | None"], "str | dict"]


class UnsupportedMethod(Exception):
    """Raised like an endpoint that rejects a structured-output method (e.g. HTTP 400)."""


def _text(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


def keywords(text: str, k: int = 6) -> list[str]:
    seen: list[str] = []
    for w in _WORD.findall(text):
        lw = w.lower()
        if lw not in _STOP and lw not in seen:
            seen.append(lw)
    return seen[:k]


class ResearchResponder:
    """Answers the graph's prompts by reading them: plans from the question's words, findings from
    the <source> passages, reports from the evidence lines."""

    def __init__(self, sufficient: bool | int = False, cite_unknown: bool = False):
        # sufficient: a bool, or the round from which reflection says the evidence is enough
        self.sufficient = sufficient
        self.cite_unknown = cite_unknown

    def __call__(self, messages: list[BaseMessage], schema: str | None) -> str | dict:
        prompt = _text(messages)
        question = self._question(prompt)
        if schema == "Plan":
            n = int(m.group(1)) if (m := re.search(r"exactly (\d+) queries", prompt)) else 3
            return {"queries": [{"query": q, "rationale": f"Covers {a}."}
                                for q, a in self._queries(question, n, aspects=PLAN_ASPECTS)]}
        if schema == "Extraction":
            return {"findings": [{"source_id": sid, "finding": first_sentence(text)}
                                 for sid, text in sources_in(prompt)[:6]]}
        if schema == "Reflection":
            rnd = int(m.group(1)) if (m := re.search(r"Round (\d+) of", prompt)) else 1
            enough = self.sufficient if isinstance(self.sufficient, bool) else rnd >= self.sufficient
            n = int(m.group(1)) if (m := re.search(r"at most (\d+) new", prompt)) else 2
            follow = [] if enough else [q for q, _ in self._queries(question, n, FOLLOW_ASPECTS, rnd)]
            return {"sufficient": enough, "knowledge_gaps": [] if enough else [f"More on {follow[0]}"],
                    "follow_up_queries": follow}
        if schema is not None:
            raise ValueError(f"ResearchResponder has no answer for schema {schema}")
        return self._report(prompt, question)

    @staticmethod
    def _question(prompt: str) -> str:
        m = re.search(r"<question>\s*(.*?)\s*</question>", prompt, re.S) or re.search(
            r"^Question:\s*(.+)$", prompt, re.M)
        return m.group(1).strip() if m else prompt[-200:]

    @staticmethod
    def _queries(question: str, n: int, aspects: list[str], rnd: int = 0) -> list[tuple[str, str]]:
        words = keywords(question, 5) or ["topic"]
        out = []
        for i in range(n):
            aspect = aspects[(i + rnd * n) % len(aspects)]
            out.append((" ".join(words) + f" {aspect}", aspect))
        return out

    def _report(self, prompt: str, question: str) -> str:
        lines = re.findall(r"^\[(\d+)\]\s*(.+)$", prompt, re.M)
        lines += [(str(sid), first_sentence(text)) for sid, text in sources_in(prompt)]
        if not lines:
            return f"The evidence gathered does not answer the question: {question}"
        concise = "two short paragraphs" in prompt
        detailed = "## Limitations" in prompt
        first = lines[0]
        parts = [f"In short: {first[1]} [{first[0]}]."]
        body = lines[1:3] if concise else lines[1:]
        if detailed:
            parts.append("## Summary\n\n" + " ".join(f"{t} [{i}]." for i, t in lines[:3]))
            parts.append("## Findings")
        parts += [f"{t} [{i}]." for i, t in body]
        if self.cite_unknown:
            parts.append("One more claim rests on a source that does not exist [99].")
        if detailed:
            parts.append("## Limitations\n\nOnly the sources listed were consulted; claims they do not "
                         "cover could not be confirmed.")
        parts.append("## Key findings\n\n" + "\n".join(f"- {t} [{i}]" for i, t in lines[:3]))
        return "\n\n".join(parts)


PLAN_ASPECTS = ["overview", "evidence", "numbers", "history", "criticism", "recent developments",
                "mechanism", "comparison", "costs", "outlook"]
FOLLOW_ASPECTS = ["limitations", "latest data", "case studies", "expert views", "risks", "regional"]


def sources_in(prompt: str) -> list[tuple[int, str]]:
    """(id, text) of every <source id="N" ...>text</source> block in a prompt."""
    return [(int(i), t.strip())
            for i, t in re.findall(r'<source id="(\d+)"[^>]*>(.*?)</source>', prompt, re.S)]


def first_sentence(text: str, limit: int = 220) -> str:
    text = re.sub(r"^#+\s+[^\n]*\n+", "", text.strip()).strip() or text  # a heading is not a finding
    text = " ".join(text.split())
    m = re.match(r"(.{20,}?[.!?])(\s|$)", text)
    s = (m.group(1) if m else text)[:limit].strip()
    return s.rstrip(".")


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers from a script queue, then from a responder; no network."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    responder: Any = Field(default_factory=ResearchResponder)
    script: list[Any] = Field(default_factory=list)  # consumed first: str | dict | AIMessage | Exception
    unsupported_methods: set[str] = Field(default_factory=set)
    latency_s: float = 0.0
    calls: list[dict] = Field(default_factory=list)  # one entry a call: start, end, kind, tokens
    # set on bound copies
    mode: str = "text"  # text | json_schema | tools
    schema_name: str | None = None
    tools_: list[dict] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    # -- binding --------------------------------------------------------------------------

    def _shared(self, **update: Any) -> "ScriptedChatModel":
        # bound copies share the queue and the call log with their parent
        copy = self.model_copy(update=update)
        copy.script = self.script
        copy.calls = self.calls
        return copy

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any):
        specs = [convert_to_openai_tool(t)["function"] for t in tools]
        return self._shared(mode="tools", tools_=specs, schema_name=specs[0]["name"] if specs else None)

    def with_structured_output(self, schema: Any, *, method: str = "function_calling",
                               include_raw: bool = False, **kwargs: Any):
        name = schema.__name__ if isinstance(schema, type) else schema.get("title", "Output")
        if method in self.unsupported_methods:
            async def refuse(_: Any) -> Any:
                self.calls.append({"start": time.time(), "end": time.time(), "kind": f"refused:{method}"})
                raise UnsupportedMethod(f"400: response method {method} is not supported by this server")
            return RunnableLambda(refuse)
        bound = self._shared(mode="json_schema" if method == "json_schema" else "tools",
                             schema_name=name, tools_=[convert_to_openai_tool(schema)["function"]])

        async def run(inp: Any) -> Any:
            raw = await bound.ainvoke(inp)
            try:
                if raw.tool_calls:
                    data = raw.tool_calls[0]["args"]
                else:
                    data = json.loads(raw.content)
                parsed = schema.model_validate(data) if isinstance(schema, type) else data
                err = None
            except Exception as e:  # surfaced like langchain's include_raw parsing_error
                if not include_raw:
                    raise
                parsed, err = None, e
            return {"raw": raw, "parsed": parsed, "parsing_error": err} if include_raw else parsed

        return RunnableLambda(run)

    # -- generation -----------------------------------------------------------------------

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        prompt = _text(messages)
        item = self.script.pop(0) if self.script else None
        if item is None:
            schema = self.schema_name if self.mode != "text" else None
            if schema is None and (m := re.search(r'matching this JSON schema:\s*(\{.*\})', prompt, re.S)):
                schema = json.loads(m.group(1)).get("title")  # the plain-JSON fallback path
                item = json.dumps(self.responder(messages, schema))
            else:
                item = self.responder(messages, schema)
        if isinstance(item, Exception):
            raise item
        if isinstance(item, AIMessage):
            msg = item
        elif self.mode == "tools" and isinstance(item, dict):
            msg = AIMessage(content="", tool_calls=[{"name": self.schema_name or "tool", "args": item,
                                                     "id": f"call_{len(self.calls)}"}])
        else:
            msg = AIMessage(content=item if isinstance(item, str) else json.dumps(item))
        out_chars = len(str(msg.content)) + len(json.dumps([tc["args"] for tc in msg.tool_calls]))
        msg.usage_metadata = {"input_tokens": max(1, len(prompt) // 4),
                              "output_tokens": max(1, out_chars // 4),
                              "total_tokens": max(1, len(prompt) // 4) + max(1, out_chars // 4)}
        return msg

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        t0 = time.time()
        if self.latency_s:
            time.sleep(self.latency_s)
        msg = self._reply(messages)
        self._log(t0, msg)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:
        t0 = time.time()
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        msg = self._reply(messages)
        self._log(t0, msg)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _log(self, t0: float, msg: AIMessage) -> None:
        self.calls.append({"start": t0, "end": time.time(), "kind": self.schema_name or "text",
                           "prompt_tokens": msg.usage_metadata["input_tokens"],
                           "completion_tokens": msg.usage_metadata["output_tokens"]})


def sequential_calls(calls: list[dict], tolerance: float = 1e-4) -> int:
    """Length of the longest chain of calls that ran one after another (the critical path)."""
    done = [c for c in calls if not str(c.get("kind", "")).startswith("refused")]
    done.sort(key=lambda c: c["end"])
    best: list[int] = []
    for i, c in enumerate(done):
        best.append(1 + max((best[j] for j in range(i) if done[j]["end"] <= c["start"] + tolerance),
                            default=0))
    return max(best, default=0)


def sample_corpus_dir() -> Path:
    """The small corpus the project ships: research it offline with --corpus or in notebooks."""
    return SAMPLE_CORPUS


def offline_settings(**overrides: Any):
    """ResearchSettings for a fully offline run: scripted model, local sample corpus."""
    from graph.settings import make_settings
    from tools.providers.local import LocalProvider

    corpus = overrides.pop("corpus", None) or str(SAMPLE_CORPUS)
    model = overrides.pop("chat_model", None) or ScriptedChatModel()
    settings = make_settings(providers=["local"], corpus=corpus, **overrides)
    return settings.with_chat_model(model).with_search_providers([LocalProvider.from_folder(corpus)])
