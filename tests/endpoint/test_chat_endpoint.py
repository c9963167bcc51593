"""The endpoint with the real ``openai`` client against a real Router over the HF inference
strategy on the tiny model (no Ray): response schema, logprobs, recorded ids, errors."""
import asyncio

import pytest

from roll.config.roles import WorkerConfig
from roll.rollout.chat import ChatRenderer
from roll.rollout.control import RolloutControl
from roll.rollout.endpoint import EpisodeSession, acquire_endpoint, release_endpoint
from roll.rollout.router import Router

openai = pytest.importorskip("openai")
hf_infer = pytest.importorskip("roll.strategies.hf_infer")


@pytest.fixture(scope="module")
def strategy(tiny_model_dir):
    return hf_infer.HFInferStrategy(WorkerConfig(), tiny_model_dir)


def serve(tok, strategy, agent, **session_kwargs):
    """Runs ``agent(client, session)`` on a thread against one open session; returns its result
    and the session."""
    async def main():
        kwargs = {"temperature": 1.0, "max_new_tokens": 12, "max_context_tokens": 1024, "sample_seed": 5}
        kwargs.update(session_kwargs)
        session = EpisodeSession("ep/0", Router([strategy]), RolloutControl(), ChatRenderer(tok), **kwargs)
        endpoint = await acquire_endpoint()
        url = endpoint.open(session)
        try:
            def run():
                with openai.OpenAI(base_url=url, api_key="x", max_retries=0) as client:
                    return agent(client, session)
            return await asyncio.to_thread(run), session, url
        finally:
            await endpoint.close(session)
            await release_endpoint(endpoint)

    return asyncio.run(main())


def test_a_completion_is_a_valid_openai_response_and_is_recorded(tok, strategy):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]

    def agent(client, session):
        models = client.models.list()
        reply = client.chat.completions.create(model="whatever", messages=messages, logprobs=True,
                                               temperature=0.3, extra_body={"return_token_ids": True})
        return models, reply

    (models, reply), session, _ = serve(tok, strategy, agent)
    assert [m.id for m in models.data] == ["roll-policy"]
    assert reply.object == "chat.completion" and reply.model == "whatever" and len(reply.choices) == 1
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length") and choice.message.tool_calls is None
    [rec] = session.records
    # the prompt is the policy's chat template with the generation prompt
    want = tok.encode(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), add_special_tokens=False)
    assert rec.prompt_ids == want and reply.prompt_token_ids == want
    assert reply.completion_token_ids == rec.output_ids and 0 < len(rec.output_ids) <= 12
    assert reply.usage.prompt_tokens == len(want) and reply.usage.completion_tokens == len(rec.output_ids)
    assert reply.usage.total_tokens == len(want) + len(rec.output_ids)
    # logprobs: one per sampled token, the engine's values, recorded with the policy version
    lps = choice.logprobs.content
    assert [t.logprob for t in lps] == pytest.approx(rec.logprobs) and len(lps) == len(rec.output_ids)
    assert all(t.logprob <= 0 for t in lps) and rec.versions == [0] * len(rec.output_ids)
    assert "".join(t.token for t in lps) == tok.decode(rec.output_ids)
    content = tok.decode(rec.output_ids[:-1] if rec.output_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
                         else rec.output_ids)
    assert choice.message.content == content
    # the rollout's sampling settings win over the agent's (the trainer scores at one temperature)
    assert session.counts["sampling_overrides"] == 1 and session.segments[0].num_turns == 1


def test_refused_requests_get_openai_errors(tok, strategy):
    def agent(client, session):
        out = {}
        msgs = [{"role": "user", "content": "hi"}]
        for name, kwargs in {"n": {"n": 2}, "stream": {"stream": True}, "top_logprobs": {"logprobs": True, "top_logprobs": 3},
                             "unknown": {"extra_body": {"best_of": 2}}, "long": {"messages": [{"role": "user", "content": "a " * 2000}]},
                             "image": {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}}.items():
            try:
                client.chat.completions.create(model="m", **{"messages": msgs, **kwargs})
            except openai.BadRequestError as e:
                out[name] = (e.status_code, e.body["code"], e.body["message"])
        return out

    errors, session, _ = serve(tok, strategy, agent, max_context_tokens=256)
    assert set(errors) == {"n", "stream", "top_logprobs", "unknown", "long", "image"}
    assert errors["stream"][2].startswith("streaming is not supported")
    assert errors["unknown"][1] == "unsupported_parameter" and "best_of" in errors["unknown"][2]
    assert errors["long"][1] == "context_length_exceeded"
    assert session.records == [] and session.counts["request_errors"] == 6
    assert not any(s.num_turns for s in session.segments)  # a refused request leaves no sample


def test_urls_are_scoped_to_their_episode_and_die_with_it(tok, strategy):
    def agent(client, session):
        wrong = session.key[:-1] + ("1" if session.key.endswith("0") else "0")  # one hex digit off
        other = openai.OpenAI(base_url=str(client.base_url).replace(session.key, wrong),
                              api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            other.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        return str(client.base_url)

    url, session, _ = serve(tok, strategy, agent)
    assert url.startswith("http://127.0.0.1:") and f"/episodes/{session.key}/v1" in url
    assert session.key.startswith("ep_0-")

    async def one_closed_one_open():
        endpoint = await acquire_endpoint()
        kwargs = {"temperature": 1.0, "max_new_tokens": 4}
        done = EpisodeSession("ep/1", Router([strategy]), RolloutControl(), ChatRenderer(tok), **kwargs)
        live = EpisodeSession("ep/2", Router([strategy]), RolloutControl(), ChatRenderer(tok), **kwargs)
        urls = endpoint.open(done), endpoint.open(live)
        await endpoint.close(done)
        try:
            def ask(url):
                with openai.OpenAI(base_url=url, api_key="x", max_retries=0) as client:
                    try:
                        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
                    except openai.NotFoundError as e:
                        return e.body["code"]
                    return "answered"
            return [await asyncio.to_thread(ask, u) for u in urls], live
        finally:
            await endpoint.close(live)
            await release_endpoint(endpoint)

    answers, live = asyncio.run(one_closed_one_open())
    assert answers == ["episode_not_found", "answered"] and len(live.records) == 1


@pytest.mark.integration
def test_a_three_turn_agent_on_the_tiny_model_is_token_exact(tok, tiny_model_dir):
    from endpoint_policy import run_agent_episode
    from scripted_clients import Recording

    client = Recording(hf_infer.HFInferStrategy(WorkerConfig(), tiny_model_dir))
    [traj] = run_agent_episode(tok, client, "three_turns", max_new_tokens=8)
    assert traj.failure is None, traj.failure_detail
    assert len(client.calls) == 3 and traj.num_turns == 3
    for k, (req, res) in enumerate(client.calls):
        start = len(req.prompt_ids)
        assert traj.input_ids[:start] == req.prompt_ids  # each prompt is the exact history
        assert traj.input_ids[start:start + len(res.output_ids)] == res.output_ids  # sampled ids, unchanged
        assert traj.logprobs[start:start + len(res.output_ids)] == pytest.approx(res.logprobs)
        assert set(traj.token_turns[start:start + len(res.output_ids)]) == {k}
    assert sum(traj.loss_mask) == sum(len(res.output_ids) for _, res in client.calls)
    # the text is the whole conversation through the template (sampled ids need not be canonical)
    assert tok.decode(traj.input_ids) == tok.apply_chat_template(traj.messages, tokenize=False)
