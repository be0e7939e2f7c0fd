"""Chat models for each stage, and structured output that survives real endpoints.

Any OpenAI-compatible server works (OpenAI, OpenRouter, Ollama, vLLM, LM Studio, llama.cpp). Strict
json_schema is tried first; servers or small models that reject or fail it fall back to function
calling, then to plain JSON parsed and validated here with one repair retry. The method that worked
is remembered per endpoint and model, so a server without json_schema support pays for the failed
attempt once, not on every call.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ValidationError

from graph.settings import ResearchSettings

log = logging.getLogger("deep_research.llm")
Stage = Literal["plan", "extract", "reflect", "write"]
M = TypeVar("M", bound=BaseModel)
METHODS = ("json_schema", "function_calling", "json_text")
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_models: dict[tuple, BaseChatModel] = {}
# with_structured_output rebuilds the JSON schema on every call (~4 ms of CPU, which adds up under
# load); the value holds the model itself so its id cannot be reused while the entry lives
_runnables: OrderedDict[tuple, tuple[BaseChatModel, Any]] = OrderedDict()
_working_method: dict[tuple, str] = {}


class LLMError(RuntimeError):
    """The model endpoint failed in a way the user must fix (auth, unknown model, unreachable)."""


@dataclass
class Usage:
    """What a node spent on the model, merged into ResearchState.stats."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    warnings: list[str] = field(default_factory=list)

    def add(self, msg: BaseMessage | None, prompt_chars: int = 0) -> None:
        self.llm_calls += 1
        um = getattr(msg, "usage_metadata", None) or {}
        if um:
            self.prompt_tokens += int(um.get("input_tokens", 0))
            self.completion_tokens += int(um.get("output_tokens", 0))
        else:  # some local servers send no usage: estimate rather than report zero
            self.prompt_tokens += prompt_chars // 4
            self.completion_tokens += len(text_of(msg)) // 4 if msg is not None else 0

    def stats(self) -> dict[str, int]:
        return {"llm_calls": self.llm_calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}


def api_key() -> str | None:
    return os.environ.get("DEEP_RESEARCH_API_KEY") or os.environ.get("OPENAI_API_KEY")


def chat_model(settings: ResearchSettings, stage: Stage) -> BaseChatModel:
    """The chat model for a stage: an injected one, else ChatOpenAI on the configured endpoint."""
    if settings._chat_model is not None:
        return settings._chat_model
    name = settings.model_for(stage)
    key = (name, settings.base_url, settings.temperature, settings.llm_timeout_s, settings.llm_max_retries)
    if key not in _models:
        from langchain_openai import ChatOpenAI

        secret = api_key()
        if not secret and not settings.base_url:
            raise LLMError("No model endpoint is configured: set OPENAI_API_KEY for OpenAI, or "
                           "OPENAI_BASE_URL for another OpenAI-compatible server "
                           "(e.g. OPENAI_BASE_URL=http://127.0.0.1:11434/v1 for Ollama).")
        kwargs: dict[str, Any] = dict(model=name, base_url=settings.base_url,
                                      api_key=secret or "not-needed", timeout=settings.llm_timeout_s,
                                      max_retries=settings.llm_max_retries, stream_usage=True)
        if settings.temperature is not None:
            kwargs["temperature"] = settings.temperature
        _models[key] = ChatOpenAI(**kwargs)
    return _models[key]


def text_of(msg: BaseMessage | None) -> str:
    """Message text without reasoning blocks (<think>...</think>) that local models emit."""
    if msg is None:
        return ""
    content = msg.content
    if isinstance(content, list):
        content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return _THINK.sub("", content or "").strip()


def _json_from_text(text: str) -> Any:
    """The first JSON object in a reply, tolerating code fences and prose around it."""
    text = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if fence:
        text = fence.group(1).strip()
    start = text.find("{")
    if start < 0:
        raise ValueError("the reply contains no JSON object")
    obj, _ = json.JSONDecoder().raw_decode(text[start:])
    return obj


def _endpoint_key(model: BaseChatModel) -> tuple:
    name = getattr(model, "model_name", None)
    if name:  # the same model on the same endpoint behaves the same across instances
        return (type(model).__name__, name, str(getattr(model, "openai_api_base", "")))
    return (type(model).__name__, id(model))


_KEYLIKE = re.compile(r"\b(sk|pk|key|tok)[-_][A-Za-z0-9_\-]{6,}\b|\bBearer\s+\S+", re.I)


def safe_text(text: str) -> str:
    """Error text as a server sent it, minus our key and anything shaped like a key: some
    endpoints echo the key they refused."""
    from tools.http import redact

    return _KEYLIKE.sub("***", redact(text, [api_key()]))


def _raise_if_fatal(exc: Exception) -> None:
    """Auth, unknown model and unreachable endpoints are not fixed by another output method."""
    import openai

    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        raise LLMError("The model endpoint refused the API key: check OPENAI_API_KEY "
                       "(or DEEP_RESEARCH_API_KEY) for this endpoint.") from None
    if isinstance(exc, openai.NotFoundError):
        raise LLMError("The endpoint does not know this model (or this URL is not an OpenAI-compatible "
                       "API): check DEEP_RESEARCH_MODEL, the per-stage *_MODEL settings and "
                       "OPENAI_BASE_URL.") from None
    if isinstance(exc, openai.APIConnectionError):  # includes timeouts
        what = "timed out" if isinstance(exc, openai.APITimeoutError) else "could not be reached"
        raise LLMError(f"The model endpoint {what}: check OPENAI_BASE_URL and that the server is "
                       f"running (timeout: DEEP_RESEARCH_LLM_TIMEOUT_S).") from None


async def structured(model: BaseChatModel, schema: type[M], messages: list[BaseMessage],
                     usage: Usage) -> M:
    """Ask for an instance of `schema`, falling back method by method; raises LLMError at the end."""
    key = (_endpoint_key(model), schema.__name__)
    first = _working_method.get(key)
    order = [first] + [m for m in METHODS if m != first] if first else list(METHODS)
    prompt_chars = sum(len(str(m.content)) for m in messages)
    errors: list[str] = []
    for method in order:
        try:
            result = await _attempt(model, schema, messages, method, usage, prompt_chars)
        except (ValidationError, ValueError, json.JSONDecodeError, NotImplementedError, TypeError) as e:
            errors.append(f"{method}: {safe_text(str(e).splitlines()[0][:160] if str(e) else type(e).__name__)}")
            continue
        except LLMError:
            raise
        except Exception as e:  # a server that rejects the request shape (400) for this method
            _raise_if_fatal(e)
            errors.append(f"{method}: {type(e).__name__}: {safe_text(str(e).splitlines()[0][:160]) if str(e) else ''}")
            continue
        if first != method:
            if first is not None or method != METHODS[0]:
                log.info("structured output for %s works with %s", schema.__name__, method)
            _working_method[key] = method
        return result
    raise LLMError(f"The model gave no valid {schema.__name__} by any method ({'; '.join(errors)}).")


@lru_cache(maxsize=64)
def _strict_format(schema: type[BaseModel]) -> dict[str, Any]:
    from openai.lib._pydantic import to_strict_json_schema

    return {"name": schema.__name__, "schema": to_strict_json_schema(schema), "strict": True}


def _structured_runnable(model: BaseChatModel, schema: type[BaseModel], method: str) -> Any:
    key = (id(model), schema, method)
    hit = _runnables.get(key)
    if hit is not None and hit[0] is model:
        _runnables.move_to_end(key)
        return hit[1]
    target: Any = schema
    if method == "json_schema" and hasattr(model, "openai_api_base"):
        # given a class, ChatOpenAI routes through the SDK's parse(), which converts the schema on
        # every request; a ready strict schema goes out as is and we validate the JSON ourselves
        try:
            target = _strict_format(schema)
        except Exception:  # a private helper of the SDK: if it moves, let ChatOpenAI convert
            target = schema
    runnable = model.with_structured_output(target, method=method, include_raw=True)
    _runnables[key] = (model, runnable)
    while len(_runnables) > 256:
        _runnables.popitem(last=False)
    return runnable


async def _attempt(model: BaseChatModel, schema: type[M], messages: list[BaseMessage], method: str,
                   usage: Usage, prompt_chars: int) -> M:
    if method != "json_text":
        out = await _structured_runnable(model, schema, method).ainvoke(messages)
        usage.add(out.get("raw"), prompt_chars)
        if out.get("parsing_error") is not None or out.get("parsed") is None:
            # reasoning models may wrap JSON in <think>: one more chance from the raw text
            raw_text = text_of(out.get("raw"))
            if raw_text:
                return schema.model_validate(_json_from_text(raw_text))
            raise ValueError(str(out.get("parsing_error") or "no parsed output"))
        parsed = out["parsed"]
        return parsed if isinstance(parsed, schema) else schema.model_validate(parsed)

    # plain JSON: describe the schema in words a small model follows, validate, repair once
    instruction = (f"Reply with one JSON object only, no prose, matching this JSON schema:\n"
                   f"{json.dumps(schema.model_json_schema())}")
    convo = [*messages, HumanMessage(instruction)]
    reply = await model.ainvoke(convo)
    usage.add(reply, prompt_chars + len(instruction))
    try:
        return schema.model_validate(_json_from_text(text_of(reply)))
    except (ValidationError, ValueError) as e:
        convo += [AIMessage(text_of(reply)), HumanMessage(
            f"That was not valid: {str(e)[:500]}. Reply again with the corrected JSON object only.")]
        reply = await model.ainvoke(convo)
        usage.add(reply, prompt_chars + len(instruction))
        return schema.model_validate(_json_from_text(text_of(reply)))


async def complete(model: BaseChatModel, messages: list[BaseMessage], usage: Usage,
                   max_tokens: int | None = None) -> str:
    """Plain text completion (the report), reasoning blocks stripped."""
    bound = model.bind(max_tokens=max_tokens) if max_tokens and hasattr(model, "openai_api_base") else model
    try:
        reply = await bound.ainvoke(messages)
    except LLMError:
        raise
    except Exception as e:
        _raise_if_fatal(e)
        raise
    usage.add(reply, sum(len(str(m.content)) for m in messages))
    return text_of(reply)


def system_user(system: str, user: str) -> list[BaseMessage]:
    return [SystemMessage(system), HumanMessage(user)]


def elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 1)
