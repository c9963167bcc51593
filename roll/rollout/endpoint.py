"""An OpenAI-compatible chat-completions endpoint on localhost, backed by the rollout's router.

An agent written against the ``openai`` client (docs/tools.md, "OpenAI-compatible endpoint")
talks to ``http://127.0.0.1:PORT/episodes/<key>/v1``: ``POST /chat/completions`` and
``GET /models``; non-streaming only. Each episode opens an :class:`EpisodeSession` under a
random key, so concurrent episodes never mix and an abandoned agent (timed out, cancelled)
gets 404 once its session is closed.

A request is rendered with the policy's chat template and generated through the episode's
inference client (the env worker's Router: sticky per episode, suspended and aborted by weight
updates like any turn, resumed under the new weights). The session records per request the
prompt ids, the sampled ids, their logprobs and policy versions, and grows token-exact
*segments*:

- a request whose messages are an earlier request's messages plus the reply it got plus new
  messages *extends* that segment: its prompt is the segment's ids (sampled ids kept, never
  re-tokenized), the rest of the assistant turn the template writes, and the ids of the text
  the template adds for the new messages (rendered with the whole conversation);
- any other request (history rewritten or dropped, a side question, a second branch sent while
  the first is still generating, other tools) starts a new segment from the whole rendering.

One worker process holds one HTTP server per event loop, shared by its episodes
(:func:`acquire_endpoint` / :func:`release_endpoint`) and closed with the last of them.
"""
from __future__ import annotations

import asyncio
import json
import math
import secrets
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from roll.rollout.chat import ChatRenderer
from roll.rollout.control import RolloutControl
from roll.rollout.hosts import actor_died
from roll.rollout.router import InferenceClient
from roll.strategies.base import GenerationRequest
from roll.utils.logging import get_logger

logger = get_logger(__name__)

DEFAULT_MODEL_NAME = "roll-policy"
MAX_BODY_BYTES = 32 * 1024 * 1024
_MAX_RESUMES = 64
# Parameters an agent may send that do not change what is sampled; anything else unknown is refused.
_IGNORED = {"model", "user", "metadata", "store", "parallel_tool_calls", "service_tier", "seed", "tool_choice",
            "frequency_penalty", "presence_penalty", "stream_options", "reasoning_effort", "response_format"}
# Sampling parameters the rollout decides (the trainer scores tokens at its temperature).
_OVERRIDDEN = ("temperature", "top_p", "top_k")


class RequestError(Exception):
    """A request the endpoint refuses: answered with an OpenAI-style error body."""

    def __init__(self, status: int, message: str, code: str = "invalid_request", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass
class SessionFailure:
    """Why generation for an episode stopped; the episode ends with this failure kind."""

    kind: str
    detail: str


@dataclass
class RecordedRequest:
    """One chat completion as the model saw and produced it."""

    index: int
    segment: int
    prompt_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    """Policy version of each output token (a resumed request holds two)."""
    finish_reason: str
    messages: list[dict[str, Any]]
    """The request's messages (normalized), then the reply it got."""
    tool_calls: int = 0


@dataclass
class Segment:
    """A token-exact run of requests that extend one another: one training sample."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    turn_versions: list[int] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The conversation up to the tip (the last request's messages and its reply)."""
    tools_key: str = ""
    open_tail: list[int] = field(default_factory=list)
    """Ids that close the last assistant turn (the template's suffix the model did not emit);
    appended only when a request extends the segment."""
    busy: bool = False

    @property
    def num_turns(self) -> int:
        return len(self.turn_versions)

    def append(self, ids: list[int], model: bool, logprobs: list[float] | None = None,
               versions: list[int] | None = None) -> None:
        n = len(ids)
        self.ids += ids
        self.mask += [1 if model else 0] * n
        self.logprobs += list(logprobs) if model else [0.0] * n
        self.turns += [self.num_turns if model else -1] * n
        self.versions += list(versions) if model else [-1] * n


class EpisodeSession:
    """The endpoint's state for one episode: how to generate, and what was generated."""

    def __init__(self, episode_id: str, client: InferenceClient, control: RolloutControl, renderer: ChatRenderer,
                 *, temperature: float, top_p: float = 1.0, top_k: int = -1, max_new_tokens: int = 128,
                 max_context_tokens: int = 2048, stop_strings: list[str] | None = None, sample_seed: int = 0,
                 model_name: str = DEFAULT_MODEL_NAME, tool_parser: Any = None, max_requests: int = 64):
        self.episode_id = episode_id
        self.client, self.control, self.renderer = client, control, renderer
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.max_new_tokens, self.max_context_tokens = max_new_tokens, max_context_tokens
        self.stop_strings = list(stop_strings or [])
        self.sample_seed = sample_seed
        self.model_name = model_name
        self.tool_parser = tool_parser
        self.max_requests = max_requests
        self.key = f"{_url_safe(episode_id)}-{secrets.token_hex(8)}"
        self.records: list[RecordedRequest] = []
        self.segments: list[Segment] = []
        self.failure: SessionFailure | None = None
        self.closed = False
        self.inflight: set[str] = set()
        self.counts: dict[str, int] = {"requests": 0, "request_errors": 0, "sampling_overrides": 0,
                                       "tool_calls": 0, "malformed_tool_calls": 0, "new_segments": 0}
        self.gen_time = 0.0
        self._started = 0

    # ---- the request path ----------------------------------------------------------------
    async def complete(self, body: Any) -> dict[str, Any]:
        """The chat completion for one request body (raises RequestError)."""
        if self.closed:
            raise RequestError(404, f"episode {self.episode_id!r} has ended", "episode_closed")
        if self.failure is not None:
            raise RequestError(409, f"episode {self.episode_id!r} failed: {self.failure.kind}: {self.failure.detail}",
                               "episode_failed")
        if self._started >= self.max_requests:
            raise RequestError(400, f"this episode may make at most {self.max_requests} chat-completion requests",
                               "max_requests_exceeded")
        req = self._parse(body)
        self._started += 1
        index = self._started - 1
        seg_index, prompt = self._place(req["messages"], req["tools"])
        segment = self.segments[seg_index]
        room = self.max_context_tokens - len(prompt) - len(self.renderer.assistant_suffix_ids)
        budget = min(req["max_tokens"] or self.max_new_tokens, self.max_new_tokens, room)
        if budget <= 0:
            segment.busy = False  # a new segment stays empty: never matched, never trained
            raise RequestError(400, f"the prompt has {len(prompt)} tokens; with the reply it would pass the "
                               f"context limit of {self.max_context_tokens} tokens", "context_length_exceeded", "messages")
        try:
            out, lps, vers, finish = await self._generate(index, prompt, budget, req["stop"], req["seed"])
        except BaseException:
            segment.busy = False
            raise
        text = self.renderer.assistant_text(out)
        if finish == "stop" and not (out and out[-1] in self.renderer.stop_token_ids):
            for s in req["stop"] + self.stop_strings:  # OpenAI leaves the stop sequence out of the content
                if s and text.endswith(s):
                    text = text[: -len(s)]
                    break
        reply, calls = self._reply(text, req["tools_for_calls"])
        if calls:
            finish = "tool_calls"
        # the segment grows only once the reply exists, so a failed request leaves no trace
        segment.append(prompt[len(segment.ids):], model=False)  # all of it for a new segment
        segment.append(out, model=True, logprobs=lps, versions=vers)
        segment.turn_versions.append(min(vers, default=self.control.version))
        segment.open_tail = self.renderer.close_assistant(out)
        segment.messages = req["messages"] + [reply]
        segment.tools_key = _tools_key(req["tools"])
        segment.busy = False
        self.records.append(RecordedRequest(index, seg_index, list(prompt), out, lps, vers, finish,
                                            req["messages"] + [reply], len(calls)))
        self.counts["requests"] += 1
        return self._response(index, reply, finish, prompt, out, lps, req)

    def _parse(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        unknown = sorted(set(body) - _IGNORED - set(_OVERRIDDEN) - {
            "messages", "tools", "max_tokens", "max_completion_tokens", "stop", "n", "stream", "logprobs",
            "top_logprobs", "return_token_ids"})
        if unknown:
            raise RequestError(400, f"unsupported parameter(s) {unknown}", "unsupported_parameter", unknown[0])
        if body.get("stream"):
            raise RequestError(400, "streaming is not supported by roll's endpoint; send stream=false",
                               "unsupported_parameter", "stream")
        if body.get("n", 1) not in (1, None):
            raise RequestError(400, "only n=1 is supported (run the agent several times instead)",
                               "unsupported_parameter", "n")
        if body.get("top_logprobs"):
            raise RequestError(400, "top_logprobs is not supported (the sampled token's logprob is)",
                               "unsupported_parameter", "top_logprobs")
        if body.get("tool_choice") not in (None, "auto", "none"):
            raise RequestError(400, "tool_choice must be 'auto' or 'none'", "unsupported_parameter", "tool_choice")
        fmt = body.get("response_format")
        if fmt not in (None, {"type": "text"}):
            raise RequestError(400, "only response_format {'type': 'text'} is supported", "unsupported_parameter",
                               "response_format")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError(400, "messages must be a non-empty list", param="messages")
        tools = body.get("tools") or None
        if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
            raise RequestError(400, "tools must be a list of objects", param="tools")
        if body.get("tool_choice") == "none":
            tools_for_calls = None
        else:
            tools_for_calls = tools
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
            raise RequestError(400, "max_tokens must be a positive integer", param="max_tokens")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)) or len(stop) > 4:
            raise RequestError(400, "stop must be a string or a list of at most 4 strings", param="stop")
        if any(body.get(k) is not None and body.get(k) != default
               for k, default in zip(_OVERRIDDEN, (self.temperature, self.top_p, self.top_k))):
            self.counts["sampling_overrides"] += 1
        seed = body.get("seed")
        return {"messages": [_normalize(m, i) for i, m in enumerate(messages)], "tools": tools,
                "tools_for_calls": tools_for_calls, "max_tokens": max_tokens, "stop": stop,
                "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
                "logprobs": bool(body.get("logprobs")), "return_token_ids": bool(body.get("return_token_ids")),
                "model": str(body.get("model") or self.model_name)}

    def _place(self, messages: list[dict], tools: list[dict] | None) -> tuple[int, list[int]]:
        """The segment this request continues (marked busy) and its prompt ids."""
        key = _tools_key(tools)
        wanted = [_identity(m) for m in messages]
        for i in range(len(self.segments) - 1, -1, -1):
            seg = self.segments[i]
            tip = [_identity(m) for m in seg.messages]
            if not seg.ids or seg.busy or seg.tools_key != key or len(wanted) <= len(tip) or wanted[: len(tip)] != tip:
                continue
            # the text the template adds for the new messages, rendered with the whole history
            before = self._render(messages[: len(tip)], False, tools)
            after = self._render(messages, True, tools)
            if not after.startswith(before):
                continue  # the template rewrites history here (e.g. drops reasoning): a new segment
            seg.busy = True
            return i, seg.ids + seg.open_tail + self.renderer.encode(after[len(before):])
        prompt = self.renderer.encode(self._render(messages, True, tools))
        if self.segments:
            self.counts["new_segments"] += 1
        self.segments.append(Segment(busy=True, tools_key=key))
        return len(self.segments) - 1, prompt

    def _render(self, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None) -> str:
        try:
            return self.renderer.render_text(messages, add_generation_prompt, tools=tools)
        except Exception as e:  # a template error is the request's problem, not the episode's
            raise RequestError(400, f"the chat template cannot render these messages: {type(e).__name__}: {e}",
                               "template_error", "messages") from None

    async def _generate(self, index: int, prompt: list[int], budget: int, stop: list[str], seed: int | None):
        """Sampled ids, logprobs and per-token versions; resumed after a weight update's abort."""
        out: list[int] = []
        lps: list[float] = []
        vers: list[int] = []
        resumes = 0
        while True:
            await self.control.wait_running()
            if self.closed:
                raise RequestError(404, f"episode {self.episode_id!r} has ended", "episode_closed")
            oldest = min([v for r in self.records for v in r.versions] + vers, default=-1)
            if self.control.on_weight_update == "discard" and 0 <= oldest < self.control.version:
                self._fail("discarded", "weight update in discard mode")
            if self.control.is_stale(oldest):
                self._fail("stale", f"oldest version {oldest} < {self.control.version} - {self.control.max_staleness}")
            version = self.control.version
            mixed = (self.sample_seed * 1009 + index * 31 + resumes + (seed or 0) * 7919) & 0x7FFFFFFF
            request = GenerationRequest(
                request_id=f"{self.episode_id}/q{index}/r{resumes}", prompt_ids=prompt + out,
                max_new_tokens=budget - len(out), temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                seed=mixed, stop_strings=self.stop_strings + list(stop),
                stop_token_ids=list(self.renderer.stop_token_ids),
                meta={"episode_id": self.episode_id, "turn": index, "policy_version": version})
            self.control.request_started(request.request_id)
            self.inflight.add(request.request_id)
            t0 = time.monotonic()
            try:
                result = await self.client.generate(request)
            except Exception as e:  # typed for the scheduler: retried like any turn's
                self._fail("worker_died" if actor_died(e) else "inference_error", f"{type(e).__name__}: {e}")
            finally:
                self.control.request_finished(request.request_id)
                self.inflight.discard(request.request_id)
                self.gen_time += time.monotonic() - t0
            if len(result.logprobs) != len(result.output_ids):
                self._fail("inference_error", "logprobs and output_ids differ in length")
            out += list(result.output_ids)
            lps += [float(x) for x in result.logprobs]
            vers += [version] * len(result.output_ids)
            finished = out and out[-1] in self.renderer.stop_token_ids
            if result.finish_reason != "abort" or finished or len(out) >= budget:
                return out, lps, vers, ("length" if result.finish_reason == "length" else "stop")
            if self.closed:
                raise RequestError(404, f"episode {self.episode_id!r} has ended", "episode_closed")
            if self.control.on_weight_update == "discard":
                self._fail("discarded", "weight update in discard mode")
            resumes += 1
            if resumes > _MAX_RESUMES:
                self._fail("inference_error", "request aborted too many times")

    def _fail(self, kind: str, detail: str) -> None:
        """The episode cannot go on (stale, discarded, inference failed): record it, tell the agent."""
        if self.failure is None:
            self.failure = SessionFailure(kind, detail)
        raise RequestError(409 if kind in ("stale", "discarded") else 500, f"episode stopped: {kind}: {detail}",
                           "episode_failed")

    def _reply(self, text: str, tools: list[dict] | None) -> tuple[dict[str, Any], list[dict]]:
        """The assistant message: tool calls parsed into ``tool_calls`` when tools were given."""
        calls: list[dict] = []
        content = text
        parsed = self.tool_parser(text) if tools and self.tool_parser is not None else None
        if parsed:
            good = [c for c in parsed if not c.error]
            self.counts["malformed_tool_calls"] += len(parsed) - len(good)
            if good:
                open_tag = getattr(self.tool_parser, "open_tag", None)
                content = text[: text.find(open_tag)].strip() if open_tag and open_tag in text else ""
                for c in good:
                    calls.append({"id": f"call_{secrets.token_hex(6)}", "type": "function",
                                  "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}})
                self.counts["tool_calls"] += len(calls)
        reply: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            reply["tool_calls"] = calls
        return reply, calls

    def _response(self, index: int, reply: dict, finish: str, prompt: list[int], out: list[int], lps: list[float],
                  req: dict) -> dict[str, Any]:
        message = {"role": "assistant", "content": reply["content"] if reply["content"] or not reply.get("tool_calls") else None}
        if reply.get("tool_calls"):
            message["tool_calls"] = reply["tool_calls"]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if req["logprobs"]:
            tok = self.renderer.tokenizer
            content = []
            for i, lp in zip(out, lps):
                piece = tok.decode([i], skip_special_tokens=False)
                content.append({"token": piece, "logprob": lp if math.isfinite(lp) else -9999.0,
                                "bytes": list(piece.encode("utf-8")), "top_logprobs": []})
            choice["logprobs"] = {"content": content, "refusal": None}
        resp: dict[str, Any] = {
            "id": f"chatcmpl-{self.key}-{index}", "object": "chat.completion", "created": int(time.time()),
            "model": req["model"], "choices": [choice], "system_fingerprint": None,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(out), "total_tokens": len(prompt) + len(out)},
        }
        if req["return_token_ids"]:
            resp["prompt_token_ids"], resp["completion_token_ids"] = list(prompt), list(out)
        return resp

    async def close(self) -> None:
        """No more requests: later ones get 404; generation still running for it is aborted."""
        self.closed = True
        if self.inflight:
            try:
                await self.client.abort(sorted(self.inflight))
            except Exception as e:  # the episode is over either way; the engine drops finished requests
                logger.warning("aborting the requests of episode %s failed: %s", self.episode_id, e)


def _url_safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]


def _tools_key(tools: list[dict] | None) -> str:
    return json.dumps(tools, sort_keys=True) if tools else ""


def _normalize(message: Any, i: int) -> dict[str, Any]:
    """An OpenAI message as the chat template expects it: text content (parts joined, None as
    ""), tool calls with JSON-string arguments."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise RequestError(400, f"messages[{i}] must be an object with a role", param=f"messages[{i}]")
    content = message.get("content")
    if content is None:
        content = ""
    elif isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise RequestError(400, f"messages[{i}]: only text content parts are supported", param=f"messages[{i}]")
            parts.append(part["text"])
        content = "".join(parts)
    elif not isinstance(content, str):
        raise RequestError(400, f"messages[{i}].content must be text", param=f"messages[{i}]")
    out: dict[str, Any] = {"role": message["role"], "content": content}
    calls = message.get("tool_calls")
    if calls:
        norm = []
        for c in calls:
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise RequestError(400, f"messages[{i}].tool_calls: each call needs a function name", param=f"messages[{i}]")
            args = fn.get("arguments", "{}")
            norm.append({"id": c.get("id", ""), "type": "function",
                         "function": {"name": fn["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}})
        out["tool_calls"] = norm
    for key in ("tool_call_id", "name"):
        if isinstance(message.get(key), str):
            out[key] = message[key]
    return out


def _identity(message: dict[str, Any]) -> tuple:
    """What makes two messages the same turn of a conversation (call ids and argument spacing
    aside: clients regenerate ids and re-serialize JSON)."""
    calls = []
    for c in message.get("tool_calls") or []:
        args = c["function"]["arguments"]
        try:
            args = json.dumps(json.loads(args), sort_keys=True)
        except ValueError:
            pass
        calls.append((c["function"]["name"], args))
    return message["role"], message["content"], tuple(calls), message.get("name")


class ChatEndpoint:
    """The HTTP server (aiohttp) on 127.0.0.1; sessions are registered by key."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host, self.port = host, port
        self.sessions: dict[str, EpisodeSession] = {}
        self._runner: Any = None

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/episodes/{key}/v1/chat/completions", self._chat)
        app.router.add_get("/episodes/{key}/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        for s in list(self.sessions.values()):
            await s.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def base_url(self, session: EpisodeSession) -> str:
        return f"http://{self.host}:{self.port}/episodes/{session.key}/v1"

    def open(self, session: EpisodeSession) -> str:
        self.sessions[session.key] = session
        return self.base_url(session)

    async def close(self, session: EpisodeSession) -> None:
        self.sessions.pop(session.key, None)
        await session.close()

    def _session(self, request: Any) -> EpisodeSession:
        s = self.sessions.get(request.match_info["key"])
        if s is None:
            raise RequestError(404, "no such episode (it has ended, or the URL is not one roll handed out)",
                               "episode_not_found")
        return s

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        session = None
        try:
            session = self._session(request)
            try:
                body = await request.json()
            except ValueError as e:
                raise RequestError(400, f"the request body is not JSON ({e})") from None
            return web.json_response(await session.complete(body))
        except RequestError as e:
            if session is not None:
                session.counts["request_errors"] += 1
            return web.json_response(e.body(), status=e.status)
        except Exception as e:  # a bug here: the agent gets a 500, the log gets the traceback
            logger.exception("chat completion for %s failed", request.path)
            if session is not None:
                session.counts["request_errors"] += 1
            return web.json_response(RequestError(500, f"{type(e).__name__}: {e}", "internal_error").body(), status=500)

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        try:
            s = self._session(request)
        except RequestError as e:
            return web.json_response(e.body(), status=e.status)
        return web.json_response({"object": "list", "data": [
            {"id": s.model_name, "object": "model", "created": 0, "owned_by": "roll"}]})


class _Shared:
    def __init__(self) -> None:
        self.endpoint = ChatEndpoint()
        self.users = 0
        self.started = False
        self.lock = asyncio.Lock()


_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Event loop -> the endpoint its episodes share."""


async def acquire_endpoint() -> ChatEndpoint:
    """The running loop's endpoint, started on first use; pair with :func:`release_endpoint`."""
    loop = asyncio.get_running_loop()
    shared = _SHARED.get(loop)
    if shared is None:
        shared = _SHARED[loop] = _Shared()
    shared.users += 1
    try:
        async with shared.lock:
            if not shared.started:
                await shared.endpoint.start()
                shared.started = True
    except BaseException:
        await release_endpoint(shared.endpoint)
        raise
    return shared.endpoint


async def release_endpoint(endpoint: ChatEndpoint) -> None:
    """One user fewer; the last one stops the server."""
    loop = asyncio.get_running_loop()
    shared = _SHARED.get(loop)
    if shared is None or shared.endpoint is not endpoint:
        return
    shared.users -= 1
    if shared.users <= 0:
        _SHARED.pop(loop, None)
        async with shared.lock:
            if shared.started:
                await endpoint.stop()
