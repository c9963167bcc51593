"""EpisodeSession on its own (no HTTP): weight updates during a request, staleness, and the
chaining rules of segments, with a scripted inference client."""
import asyncio

import pytest
from endpoint_policy import ScriptedPolicy

from roll.rollout.chat import ChatRenderer
from roll.rollout.control import RolloutControl
from roll.rollout.endpoint import EpisodeSession, RequestError
from roll.strategies.base import GenerationResult


def session_for(tok, client, control=None, **kwargs):
    return EpisodeSession("ep/0", client, control or RolloutControl(), ChatRenderer(tok), temperature=1.0,
                          max_new_tokens=32, **kwargs)


class AbortedOnce(ScriptedPolicy):
    """The first call is cut by a weight update after 2 tokens (version 0 -> 1); the resumed
    call returns the rest of the reply."""

    def __init__(self, tok, script, control):
        super().__init__(tok, script)
        self.control = control

    async def generate(self, request):
        full = await super().generate(request)
        if len(self.requests) == 1:
            self.control.version = 1
            return GenerationResult(request.request_id, full.output_ids[:2], full.logprobs[:2], "abort", 0)
        # the resumed request: the rest of the same reply
        return GenerationResult(request.request_id, full.output_ids[2:], full.logprobs[2:], "stop", 1)


def test_a_request_cut_by_a_weight_update_resumes_under_the_new_version(tok):
    control = RolloutControl()
    client = AbortedOnce(tok, ["one two three four"], control)
    session = session_for(tok, client, control)
    msgs = [{"role": "user", "content": "count"}]
    reply = asyncio.run(session.complete({"messages": msgs}))
    first, second = client.requests
    # the resumed request continues from the partial tokens
    partial = (tok.encode("one two three four", add_special_tokens=False) + [client.eot])[:2]
    assert second.prompt_ids == first.prompt_ids + partial
    [rec] = session.records
    assert rec.versions == [0, 0] + [1] * (len(rec.output_ids) - 2)
    assert reply["choices"][0]["message"]["content"] == "one two three four"
    assert session.segments[0].turn_versions == [0]


def test_a_stale_episode_fails_and_refuses_further_requests(tok):
    control = RolloutControl(max_staleness=0)
    session = session_for(tok, ScriptedPolicy(tok, ["a", "b"]), control)
    msgs = [{"role": "user", "content": "x"}]
    reply = asyncio.run(session.complete({"messages": msgs}))
    control.version = 1  # a weight update: the first turn is now too old
    msgs += [reply["choices"][0]["message"], {"role": "user", "content": "y"}]
    with pytest.raises(RequestError) as e:
        asyncio.run(session.complete({"messages": msgs}))
    assert e.value.status == 409 and session.failure.kind == "stale"
    with pytest.raises(RequestError, match="failed: stale"):
        asyncio.run(session.complete({"messages": msgs[:1]}))


def test_chaining_rules(tok):
    session = session_for(tok, ScriptedPolicy(tok, ["a", "b", "c", "d", "e"]))
    sys_msg = {"role": "system", "content": "s"}

    def ask(messages, **extra):
        return asyncio.run(session.complete({"messages": messages, **extra}))["choices"][0]["message"]

    m1 = [sys_msg, {"role": "user", "content": "q1"}]
    r1 = ask(m1)
    ask(m1 + [r1, {"role": "user", "content": "q2"}])                       # extends segment 0
    ask(m1)                                                                 # the same question again: a branch
    ask(m1 + [{"role": "assistant", "content": "edited"}, {"role": "user", "content": "q2"}])  # rewritten reply
    ask(m1 + [r1, {"role": "user", "content": "q2"}], tools=[{"type": "function", "function": {"name": "f"}}])
    assert [r.segment for r in session.records] == [0, 0, 1, 2, 3]
    assert [s.num_turns for s in session.segments] == [2, 1, 1, 1]
    assert session.counts["new_segments"] == 3
