"""EnvManager: token-exact multi-turn trajectories, step mode, truncation and typed failures."""
import asyncio

import gymnasium
import pytest
import roll.envs  # noqa: F401  (registers the shipped envs; tests may import them)
from rollout_fakes import ScriptedClient

from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig
from roll.rollout.chat import ChatRenderer
from roll.rollout.env_manager import EpisodeSpec
from roll.workers.environment import EnvironmentWorker

SHIPPED_ENV_IDS = sorted(k for k in gymnasium.registry if k.startswith("roll/"))


def run_episode(tok, env_id, client, seed=3, max_turns=3, mode="trajectory", **mkw):
    envs = {"t": EnvConfig(env_id=env_id, max_turns=max_turns, step_timeout_s=mkw.pop("step_timeout_s", 10.0),
                           **({"turn_template": mkw.pop("turn_template")} if "turn_template" in mkw else {}))}
    gen = GeneratingArgs(max_new_tokens=mkw.pop("max_new_tokens", 32))
    mcfg = EnvManagerConfig(group_size=1, mode=mode, **mkw)
    worker = EnvironmentWorker(envs, mcfg, gen, tok, [client])
    spec = EpisodeSpec("ep0", "t", "t/0", seed)
    return asyncio.run(worker.run_episode(spec))


def render_ids(tok, system, messages, add_generation_prompt=False, tools=None):
    text = tok.apply_chat_template([{"role": "system", "content": system}] + messages, tokenize=False,
                                   add_generation_prompt=add_generation_prompt, tools=tools)
    return tok.encode(text, add_special_tokens=False)


def model_spans(traj):
    spans, cur = [], []
    for i, (tid, m) in enumerate(zip(traj.input_ids, traj.loss_mask)):
        if m:
            cur.append(i)
        elif cur:
            spans.append(cur)
            cur = []
    if cur:
        spans.append(cur)
    return spans


def test_shipped_envs_are_registered():
    assert "roll/Sokoban-v0" in SHIPPED_ENV_IDS and "roll/FrozenLake-v0" in SHIPPED_ENV_IDS


@pytest.mark.parametrize("env_id", SHIPPED_ENV_IDS)
def test_token_exact_against_whole_conversation_rendering(tok, env_id):
    client = ScriptedClient(tok)
    [traj] = run_episode(tok, env_id, client, max_turns=3)
    assert traj.failure is None, traj.failure_detail
    system = EnvConfig(env_id=env_id).system_prompt
    # the assembled ids equal the chat template's rendering of the whole conversation
    # tool envs (roll/Tools-v0, docs/tools.md) render their tool schemas into the first prompt
    try:
        tools = gymnasium.make(env_id).get_wrapper_attr("tool_schemas")
    except AttributeError:
        tools = None
    if traj.messages[0]["role"] == "system":  # an agent function (roll/AgentFunction-v0) writes its own
        text = tok.apply_chat_template(traj.messages, tokenize=False, tools=tools)
        assert traj.input_ids == tok.encode(text, add_special_tokens=False)
    else:
        assert traj.input_ids == render_ids(tok, system, traj.messages, tools=tools)
    # ... and every model span is exactly what the engine returned, with its logprobs
    spans = model_spans(traj)
    assert len(spans) == traj.num_turns == len(client.requests)
    for span, req in zip(spans, client.requests):
        expected = client.output_ids(req)
        assert [traj.input_ids[i] for i in span] == expected
        assert [traj.logprobs[i] for i in span] == pytest.approx([-0.01 * ((k + req.seed) % 7 + 1) for k in range(len(expected))])
        # the request's prompt is exactly the trajectory up to that span (history never re-tokenized)
        assert req.prompt_ids == traj.input_ids[: span[0]]
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.loss_mask) if not m)
    assert traj.turn_versions == [0] * traj.num_turns


def test_non_canonical_generation_is_kept_unchanged(tok):
    """Documented non-prefix-stable case: a model may emit a tokenization of its text that the
    tokenizer would not produce. Re-rendering then differs; we keep the generated ids."""
    class CharByChar(ScriptedClient):
        def output_ids(self, request):
            ids = []
            for ch in "Left":  # one token per character instead of the merged "Left"
                ids += tok.encode(ch, add_special_tokens=False)
            return tok.encode("<answer>", add_special_tokens=False) + ids + tok.encode("</answer>", add_special_tokens=False) + [self.eot_id]

    client = CharByChar(tok)
    [traj] = run_episode(tok, "roll/FrozenLake-v0", client, max_turns=2)
    rerendered = render_ids(tok, EnvConfig(env_id="x").system_prompt, traj.messages)
    assert traj.input_ids != rerendered  # re-tokenizing the text would change the sample
    assert tok.decode(traj.input_ids) == tok.decode(rerendered)  # same text
    for span, req in zip(model_spans(traj), client.requests):
        assert [traj.input_ids[i] for i in span] == client.output_ids(req)


def test_missing_end_of_turn_is_appended_as_non_model_token(tok):
    renderer = ChatRenderer(tok, "s")
    eot = renderer.end_of_turn_id

    class NoEot(ScriptedClient):
        def output_ids(self, request):
            return super().output_ids(request)[:-1]  # as if cut by max_new_tokens

    client = NoEot(tok)
    [traj] = run_episode(tok, "roll/FrozenLake-v0", client, max_turns=2)
    for span in model_spans(traj):
        after = span[-1] + 1
        assert traj.input_ids[after] == eot and traj.loss_mask[after] == 0
    assert traj.input_ids == render_ids(tok, EnvConfig(env_id="x").system_prompt, traj.messages)


@pytest.mark.parametrize("mode", ["trajectory", "step"])
def test_responses_cut_at_max_new_tokens_are_counted(tok, mode):
    # <answer>Dir</answer> and the end of turn need more than 3 tokens: every response is cut
    cut = run_episode(tok, "roll/FrozenLake-v0", ScriptedClient(tok), max_turns=2, mode=mode, max_new_tokens=3)
    whole = run_episode(tok, "roll/FrozenLake-v0", ScriptedClient(tok), max_turns=2, mode=mode)
    assert {t.metrics["cut_response_rate"] for t in cut} == {1.0}
    assert {t.metrics["cut_response_rate"] for t in whole} == {0.0}


@pytest.mark.parametrize("mode", ["trajectory", "step"])
def test_a_first_prompt_that_leaves_no_room_for_an_answer_is_a_context_overflow(tok, mode):
    # step mode used to end such an episode after no turn as merely truncated: a batch of nothing, no failure
    [traj] = run_episode(tok, "roll/FrozenLake-v0", ScriptedClient(tok), max_turns=2, mode=mode, max_context_tokens=20)
    assert traj.failure == "context_overflow" and traj.num_turns == 0
    assert "leaves no room for an answer within max_context_tokens=20" in traj.failure_detail
    # a context that fills up after the first turn still ends the episode as truncated
    [*first, last] = run_episode(tok, "roll/FrozenLake-v0", ScriptedClient(tok), max_turns=4, mode=mode,
                                 max_context_tokens=230, history_window=3)
    assert last.failure is None and last.truncated and 1 <= last.num_turns < 4


def test_step_mode_samples_have_bounded_history_and_state_keys(tok):
    client = ScriptedClient(tok)
    samples = run_episode(tok, "rolltest/Countdown-v0", client, seed=3, max_turns=6, mode="step", history_window=1)
    # Countdown with seed 3 lasts 4 turns: one sample per turn
    assert [s.step_index for s in samples] == [0, 1, 2, 3]
    assert len({s.episode_id for s in samples}) == 1 and all(s.num_turns == 4 for s in samples)
    assert len({s.state_key for s in samples}) == 4
    for s, req in zip(samples, client.requests):
        assert s.input_ids[: s.prompt_length] == req.prompt_ids  # the sample is what the model saw
        assert sum(s.loss_mask) == len(client.output_ids(req))
        assert s.turn_rewards == [1.0]
        # a window of 1 keeps at most the previous turn: two assistant turns at most in context
        assert tok.decode(s.input_ids).count("<|im_start|>assistant") <= 2
    assert "Move with" in tok.decode(samples[3].input_ids)  # the instruction stays in the window


def test_feedback_tells_a_step_mode_prompt_what_the_last_answer_did_not_do(tok):
    """Without history a failed answer leaves the same prompt (and greedy decoding repeats it);
    {feedback} says the answer was no action, or that the move changed nothing."""
    answers = iter(["no tags here", "<answer>Up</answer>", "<answer>Down</answer>", "<answer>Up</answer>"])
    client = ScriptedClient(tok, answer=lambda ids, seed: next(answers))
    # FrozenLake seed 3: the player starts in the top row, so Up changes nothing
    samples = run_episode(tok, "roll/FrozenLake-v0", client, seed=3, max_turns=4, mode="step",
                          history_window=0, turn_template="{observation}{feedback}")
    prompts = [tok.decode(r.prompt_ids) for r in client.requests]
    assert "Your last" not in prompts[0]
    assert "Your last answer was not an action here: missing <answer>...</answer>" in prompts[1]
    assert "Your last action changed nothing." in prompts[2]
    assert "Your last" not in prompts[3]  # Down moved the player
    # the same page with other feedback is another state for GiGPO's step groups
    assert samples[0].state_key != samples[1].state_key
    # a template without the field renders as before
    plain = ScriptedClient(tok, answer=lambda ids, seed: "no tags here")
    run_episode(tok, "roll/FrozenLake-v0", plain, seed=3, max_turns=2, mode="step", history_window=0,
                turn_template="{observation}")
    assert plain.requests[0].prompt_ids == plain.requests[1].prompt_ids


def test_context_limit_truncates_without_showing_a_cut_observation(tok):
    client = ScriptedClient(tok)
    [traj] = run_episode(tok, "roll/Sokoban-v0", client, max_turns=10, max_context_tokens=400)
    assert traj.failure is None and traj.truncated and not traj.terminated
    assert len(traj.input_ids) <= 400
    assert traj.input_ids == render_ids(tok, EnvConfig(env_id="x").system_prompt, traj.messages)


class _Raising(gymnasium.Env):
    def __init__(self, when="step"):
        self.when = when

    def reset(self, seed=None, options=None):
        if self.when == "reset":
            raise ValueError("bad reset")
        return "obs", {"instruction": "go"}

    def step(self, action):
        if self.when == "hang":
            import time
            time.sleep(1.0)
        raise ValueError("bad step")


@pytest.mark.parametrize("when,kind", [("reset", "env_error"), ("step", "env_error"), ("hang", "env_timeout")])
def test_env_failures_are_typed(tok, when, kind):
    env_id = f"rolltest/Raising-{when}-v0"
    if env_id not in gymnasium.registry:
        gymnasium.register(id=env_id, entry_point=_Raising, kwargs={"when": when}, disable_env_checker=True)
    [traj] = run_episode(tok, env_id, ScriptedClient(tok), step_timeout_s=0.2)
    assert traj.failure == kind


def test_inference_errors_are_typed(tok):
    class Failing(ScriptedClient):
        async def generate(self, request):
            raise ConnectionError("engine gone")

    [traj] = run_episode(tok, "roll/FrozenLake-v0", Failing(tok))
    assert traj.failure == "inference_error" and "engine gone" in traj.failure_detail


THINK_STRIPPING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and not loop.last %}{{ m['content'].split('</think>')[-1] }}"
    "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_history_rewriting_template_keeps_what_the_model_saw(tok):
    """Documented non-prefix-stable case: a template that strips <think> from earlier assistant
    turns (as Qwen3's does). The trajectory keeps the generated ids, thinking included."""
    import copy

    tok2 = copy.deepcopy(tok)
    tok2.chat_template = THINK_STRIPPING_TEMPLATE
    client = ScriptedClient(tok2, answer=lambda p, s: "<think>plan</think><answer>Left</answer>")
    [traj] = run_episode(tok2, "rolltest/Countdown-v0", client, seed=2, max_turns=5)
    assert traj.num_turns == 3
    rerendered = render_ids(tok2, EnvConfig(env_id="x").system_prompt, traj.messages)
    assert traj.input_ids != rerendered  # the template would rewrite history
    assert tok2.decode(traj.input_ids).count("<think>plan</think>") == 3  # what the model saw and produced
    for span, req in zip(model_spans(traj), client.requests):
        assert [traj.input_ids[i] for i in span] == client.output_ids(req)
        assert req.prompt_ids == traj.input_ids[: span[0]]


class _SharedDataEnv(gymnasium.Env):
    """Loads class-wide data on its first construction, without a lock, as many envs do (a cached
    catalog, dataset or index): constructions at once would each load it."""

    loads = 0
    data = None

    def __init__(self):
        import time

        if type(self).data is None:
            type(self).loads += 1
            time.sleep(0.2)
            type(self).data = "catalog"

    def reset(self, seed=None, options=None):
        return "obs", {"instruction": "go"}

    def step(self, action):
        return "obs", 1.0, True, False, {}


@pytest.mark.parametrize("path", ["episodes", "prepare"])
def test_a_tags_first_env_is_built_alone(tok, path):
    env_id = f"rolltest/SharedData-{path}-v0"
    cls = type(f"SharedData_{path}", (_SharedDataEnv,), {})
    gymnasium.register(id=env_id, entry_point=cls, disable_env_checker=True)
    envs = {"t": EnvConfig(env_id=env_id, max_turns=1)}
    worker = EnvironmentWorker(envs, EnvManagerConfig(group_size=1), GeneratingArgs(max_new_tokens=8), tok, [ScriptedClient(tok)])

    async def main():
        if path == "prepare":
            return await worker.prepare({"t": 8})
        specs = [EpisodeSpec(f"ep{i}", "t", f"t/{i}", i) for i in range(8)]
        return await asyncio.gather(*(worker.run_episode(s) for s in specs))

    out = asyncio.run(main())
    assert cls.loads == 1 and worker.counters["envs_created"] == 8
    if path == "prepare":
        assert out == 8
    else:
        assert [t.failure for [t] in out] == [None] * 8
