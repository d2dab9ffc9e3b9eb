"""Agents: tool-call parsing, the multi-turn protocol, token masks, trajectory advantages, relative judge."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from payoff.algos.agent_grpo import turn_advantages
from payoff.algos.shared.group import group_advantages
from payoff.core.errors import ConfigError
from payoff.envs.text import (
    PlainFormat,
    ToolEnv,
    calculator,
    call_tool,
    parse_tool_call,
    run_tool_call,
)
from payoff.envs.text.tasks import AgentTaskConfig, make_agent_task, tool_turn
from payoff.envs.text.tools import (
    BM25,
    DocumentIndex,
    Tool,
    ToolInputError,
    memory_tool,
    safe_eval,
    search_tools,
)
from payoff.models.tokenizer import build_char_tokenizer
from payoff.rewards.relative_judge import RelativeJudge, answer_judge, normalize_group
from payoff.rollout.episodes import pack_episodes, replay_episode

TOOLS = {"calculator": calculator(), "memory": memory_tool()}


# ---- parsing and tool errors ------------------------------------------------------------
def test_valid_call_runs():
    call = parse_tool_call(
        'think <tool>{"name": "calculator", "arguments": {"expression": "12*(3+4)"}}</tool>'
    )
    assert (call.name, call.arguments, call.error) == ("calculator", {"expression": "12*(3+4)"}, "")
    assert run_tool_call(TOOLS, call) == ("84", "ok")
    assert call_tool(TOOLS, call) == ("84", True)  # call_tool: whether the tool answered


def test_no_tag_is_no_call():
    assert parse_tool_call("<answer>3</answer>") is None


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('<tool>{"name": "calculator", "arguments": {"expression": "1+1"}}', "no closing"),
        ("<tool>{name: calculator}</tool>", "invalid JSON"),
        ('<tool>["calculator"]</tool>', "expected"),
        ('<tool>{"name": "calculator", "arguments": "1+1"}</tool>', "must be an object"),
    ],
)
def test_malformed_call_is_an_error_message(text, fragment):
    result, status = run_tool_call(TOOLS, parse_tool_call(text))
    assert status == "malformed" and result.startswith("error: malformed") and fragment in result


def test_unknown_tool_lists_the_valid_ones():
    result, status = run_tool_call(
        TOOLS, parse_tool_call('<tool>{"name": "browser", "arguments": {}}</tool>')
    )
    assert status == "malformed" and "unknown tool 'browser'" in result
    assert "calculator" in result


@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ("{}", "missing required argument 'expression'"),
        ('{"expression": 5}', "must be of type string"),
        ('{"expression": "1", "x": 1}', "unknown argument 'x'"),
        ('{"expression": "__import__(\\"os\\")"}', "not allowed"),
        ('{"expression": "9**99999"}', "exponent"),
    ],
)
def test_bad_arguments_are_error_messages(arguments, fragment):
    text = f'<tool>{{"name": "calculator", "arguments": {arguments}}}</tool>'
    result, status = run_tool_call(TOOLS, parse_tool_call(text))
    assert status == "malformed" and fragment in result  # the model's mistake, charged as such


def test_safe_eval_never_evaluates_names():
    assert safe_eval("2**10 - sqrt(16)") == 1020
    with pytest.raises(ValueError):
        safe_eval("open('x')")


def test_memory_and_bm25_search(tmp_path):
    mem = {"memory": memory_tool()}
    assert (
        run_tool_call(
            mem,
            parse_tool_call(
                '<tool>{"name":"memory","arguments":{"op":"set","key":"a","value":"7"}}</tool>'
            ),
        )[0]
        == "ok"
    )
    assert (
        run_tool_call(
            mem,
            parse_tool_call('<tool>{"name":"memory","arguments":{"op":"get","key":"a"}}</tool>'),
        )[0]
        == "7"
    )
    # BM25: a rare query word outweighs a common one; longer documents are normalised.
    bm25 = BM25(["the cat sat", "the dog ran far away from the cat", "the bird"])
    assert bm25.top("dog", 3) == [1] and bm25.top("cat", 1) == [0]
    (tmp_path / "paris.txt").write_text("Paris is the capital of France.")
    (tmp_path / "rome.txt").write_text("Rome is the capital of Italy.")
    search, open_ = search_tools(DocumentIndex(tmp_path))
    assert search.fn(query="capital of Italy").split(", ")[0] == "rome"
    assert "France" in open_.fn(name="paris")
    assert (
        "no document"
        in run_tool_call(
            {"open": open_},
            parse_tool_call('<tool>{"name":"open","arguments":{"name":"oslo"}}</tool>'),
        )[0]
    )


# ---- the protocol -----------------------------------------------------------------------
def test_episode_ends_on_answer_turn_limit_and_no_action():
    env = ToolEnv([calculator()], max_turns=2)
    assert env.reset({"question": "347*58=?", "answer": "20126"})[-1]["role"] == "user"
    step = env.step(tool_turn("calculator", expression="347*58"))
    assert (step.observation, step.reward, step.done) == (
        [{"role": "tool", "content": "20126"}],
        0.0,
        False,
    )
    step = env.step("<answer>20126</answer>")
    assert step.done and step.reward == 1.0 and step.info["tool_calls"] == {"calculator": 1}

    env.reset({"question": "q", "answer": "1"})
    env.step("<tool>oops</tool>")
    step = env.step("<tool>oops</tool>")
    assert step.done and step.info["end"] == "turn_limit" and step.info["malformed"] == 2

    env.reset({"question": "q", "answer": "1"})
    assert env.step("I think it is 1").info["end"] == "no_action"


@pytest.mark.parametrize("score", [float("nan"), None, "1"])
def test_a_score_that_is_not_a_number_is_named(score):
    """NaN was read as a diverged update ('lower learning_rate'), None as a TypeError."""
    from payoff.core.errors import EnvError

    env = ToolEnv([calculator()], score=lambda answer, task: score)
    env.reset({"question": "q", "answer": "1"})
    with pytest.raises(EnvError, match=r"score function .* returned .*: it must return a number"):
        env.step("<answer>1</answer>")


def test_an_env_whose_reset_says_nothing_is_named():
    from payoff.core.errors import EnvError
    from payoff.rollout.episodes import start_episode

    class Silent(ToolEnv):
        def reset(self, task):
            super().reset(task)
            return []

    env = Silent([calculator()])
    with pytest.raises(EnvError, match="Silent.reset returned no messages"):
        start_episode(env, {"question": "q", "answer": "1"}, PlainFormat(), build_char_tokenizer())


def test_token_budget_cuts_the_episode():
    env = ToolEnv([calculator()], max_turns=10, max_tokens=50)
    env.reset({"question": "q", "answer": "1"})
    step = env.step(tool_turn("calculator", expression="1+1" + " " * 40))
    assert step.done and step.info["end"] == "token_budget"


# ---- masks ------------------------------------------------------------------------------
def test_mask_covers_only_the_model_tokens():
    tokenizer = build_char_tokenizer()
    call = tool_turn("calculator", expression="347*58")
    episode = replay_episode(
        ToolEnv([calculator()]),
        {"question": "347*58=?", "answer": "20126"},
        [call, "<answer>20126</answer>"],
        PlainFormat(),
        tokenizer,
    )
    ids, mask = episode.token_ids(), episode.model_mask()
    model_text = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    context_text = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    assert model_text == call + "<answer>20126</answer>"
    assert context_text == "347*58=?\n\n<result>20126</result>\n\n"  # prompt, tool output, newlines
    packed = pack_episodes(
        [
            episode,
            replay_episode(
                ToolEnv([calculator()]),
                {"question": "1+1=?", "answer": "2"},
                ["<answer>2</answer>"],
                PlainFormat(),
                tokenizer,
            ),
        ],
        tokenizer.pad_token_id,
    )
    assert packed.model_mask[1].sum() == len("<answer>2</answer>")
    assert (packed.model_mask <= packed.attention_mask).all()  # padding is never a target
    assert set(packed.turn_index[0][packed.model_mask[0] == 1].tolist()) == {0, 1}


# ---- advantages -------------------------------------------------------------------------
def test_trajectory_advantages_of_a_hand_made_group():
    # Two tasks, G = 3: rewards 1 (right, no call), 0.9 (right with a call), 0 (wrong).
    rewards = torch.tensor([1.0, 0.9, 0.0, 0.5, 0.5, 0.5])
    adv = group_advantages(rewards, 3, scale=False)
    assert torch.allclose(adv, torch.tensor([1 - 1.9 / 3, 0.9 - 1.9 / 3, -1.9 / 3, 0, 0, 0]))
    # Per-turn credit with gamma = 1 and only a final reward equals trajectory credit.
    per_turn = [[0.0, 1.0], [1.0], [0.0, 0.0, 0.0]]
    flat = group_advantages(torch.tensor([1.0, 1.0, 0.0]), 3, scale=False)
    out = turn_advantages(per_turn, 3, gamma=1.0, scale=False)
    assert [o[0] for o in out] == pytest.approx(flat.tolist())
    assert out[0] == pytest.approx([1 / 3, 1 / 3])
    # A tool cost at turn 0 is blamed on turn 0 only: returns-to-go -0.1 + 1 and 1.
    out = turn_advantages([[-0.1, 1.0], [1.0]], 2, gamma=1.0, scale=False)
    assert out[0] == pytest.approx([0.9 - 0.95, 1.0 - 0.95]) and out[1] == pytest.approx([0.05])


# ---- relative judge ---------------------------------------------------------------------
def test_relative_judge_normalizes_within_the_group():
    z = normalize_group([3.0, 1.0, 2.0])
    assert sum(z) == pytest.approx(0.0) and np.std(z) == pytest.approx(1.0, abs=1e-4)
    assert normalize_group([3.0, 1.0, 2.0], "minmax") == pytest.approx([1.0, 0.0, 0.5])
    assert normalize_group([5.0, 5.0, 1.0, 9.0], "rank") == pytest.approx([0.5, 0.5, 0.0, 1.0])
    assert normalize_group([4.0, 4.0], "zscore") == [0.0, 0.0]  # no preference, no signal
    # An offset or scale of the judge does not change what GRPO sees.
    assert normalize_group([30.0, 10.0, 20.0]) == pytest.approx(
        normalize_group([3.0, 1.0, 2.0]), rel=1e-5
    )
    with pytest.raises(ConfigError, match="valid"):
        normalize_group([1.0], "softmax")
    judge = RelativeJudge(answer_judge, "minmax")
    scores = judge(
        {"answer": "4"},
        ["<answer>4</answer>", "<tool>..</tool><answer>4</answer>", "<answer>5</answer>"],
    )
    assert scores[0] == 1.0 and scores[2] == 0.0 and 0 < scores[1] < 1


def test_agent_task_config_is_validated():
    with pytest.raises(ConfigError, match="calculator.*or a task of your own as 'module:Class'"):
        make_agent_task(AgentTaskConfig(name="chess"))
    from payoff.algos.agent_grpo import AgentGRPO

    with pytest.raises(ConfigError, match=r"'sft.demonstrations' must be >= 1, got 0"):
        AgentGRPO(sft={"demonstrations": 0})  # was numpy's "high <= 0" from SFT's sampling


def test_doc_search_demonstrations_succeed_with_real_tool_results(tmp_path):
    config = AgentTaskConfig(
        name="doc-search",
        max_turns=5,
        max_tokens=400,
        call_rate=1.0,
        options={"folder": str(tmp_path)},
    )
    task = make_agent_task(config)
    tokenizer = build_char_tokenizer()
    rng = np.random.default_rng(0)
    episodes = [
        replay_episode(task.make_env(), t, task.demonstration(t, rng), PlainFormat(), tokenizer)
        for t in task.sample(rng, 20)
    ]
    assert all(e.success for e in episodes)
    assert {e.turns for e in episodes} == {3, 4}  # one-hop and two-hop questions
    # The person's own document is the top search hit (BM25 on the name).
    e = episodes[0]
    assert e.messages[2]["content"].split(", ")[0] == e.task["person"].lower()


def test_doc_search_demonstrator_stops_short_on_two_hop_questions(tmp_path):
    """With call_rate 0 every two-hop demonstration answers with the city it read (wrong)."""
    config = AgentTaskConfig(
        name="doc-search", max_turns=5, call_rate=0.0, options={"folder": str(tmp_path)}
    )
    task = make_agent_task(config)
    tokenizer, rng = build_char_tokenizer(), np.random.default_rng(0)
    episodes = [
        replay_episode(task.make_env(), t, task.demonstration(t, rng), PlainFormat(), tokenizer)
        for t in task.sample(rng, 20)
    ]
    one_hop = [e for e in episodes if not e.task["hard"]]
    two_hop = [e for e in episodes if e.task["hard"]]
    assert one_hop and two_hop
    assert all(e.success and e.turns == 3 for e in one_hop)
    assert not any(e.success for e in two_hop)
    assert all(e.turns == 3 and e.task["city"] in e.messages[-1]["content"] for e in two_hop)


def test_chat_template_format_masks_only_the_assistant_content():
    from payoff.envs.text import ChatTemplateFormat

    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}|{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    call = tool_turn("calculator", expression="2*3")
    episode = replay_episode(
        ToolEnv([calculator()]),
        {"question": "2*3=?", "answer": "6"},
        [call, "<answer>6</answer>"],
        ChatTemplateFormat(tokenizer),
        tokenizer,
    )
    ids, mask = episode.token_ids(), episode.model_mask()
    assert episode.text() == f"[user]2*3=?|[assistant]{call}|[tool]6|[assistant]<answer>6</answer>|"
    assert (
        tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
        == call + "<answer>6</answer>"
    )


# A ChatML-style template in the shape real chat models use: a system block listing the tools
# (rendered with tojson), role headers, end-of-turn markers and a generation prompt.
CHATML_WITH_TOOLS = (
    "{%- if tools %}<|im_start|>system\nTools:\n"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_chat_template_with_tools_renders_the_whole_conversation():
    from payoff.envs.text import ChatTemplateFormat

    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = CHATML_WITH_TOOLS
    tools = [calculator().spec()]
    call = tool_turn("calculator", expression="12*34")
    episode = replay_episode(
        ToolEnv([calculator()]),
        {"question": "12*34=?", "answer": "408"},
        [call, "<answer>408</answer>"],
        ChatTemplateFormat(tokenizer, tools),
        tokenizer,
    )
    # The pieces add up to exactly what the template renders for the finished conversation,
    # tool list and all, and only the model's two turns are training targets.
    conversation = [
        {"role": "user", "content": "12*34=?"},
        {"role": "assistant", "content": call},
        {"role": "tool", "content": "408"},
        {"role": "assistant", "content": "<answer>408</answer>"},
    ]
    rendered = tokenizer.apply_chat_template(conversation, tools=tools, tokenize=False)
    assert episode.text() == rendered and '"name": "calculator"' in rendered
    ids, mask = episode.token_ids(), episode.model_mask()
    assert tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m]) == (
        call + "<answer>408</answer>"
    )


def _tiny_agent(tmp_path, monkeypatch, **overrides):
    from payoff.algos.agent_grpo import AgentGRPO

    monkeypatch.setenv("PAYOFF_CACHE", str(tmp_path / "cache"))
    config = {
        "sft": {
            "demonstrations": 8,
            "steps": 2,
            "batch_size": 4,
            "tiny": {"hidden_size": 32, "layers": 1, "heads": 2, "intermediate_size": 64},
        },
        "task": {"eval_size": 4},
        "steps": 2,
        "tasks_per_step": 2,
        "group_size": 2,
        "max_new_tokens": 12,
        "eval_every": 2,
        **overrides,
    }
    return AgentGRPO(**config)


@pytest.mark.parametrize("credit", ["trajectory", "turn"])
def test_trainer_logs_episode_metrics_and_resumes_exactly(tmp_path, monkeypatch, credit):
    agent = _tiny_agent(tmp_path, monkeypatch, credit=credit, judge_weight=0.5)
    agent.learn(1)
    state = agent.state_dict()
    agent.learn(1)  # one more
    record = next(r for r in agent.history if "train/success" in r)
    for key in (
        "train/turns",
        "train/tool_calls",
        "train/malformed",
        "train/tokens",
        "perf/episodes_per_s",
    ):
        assert key in record
    resumed = _tiny_agent(tmp_path, monkeypatch, credit=credit, judge_weight=0.5)
    resumed.load_state_dict(state)
    resumed.learn(1)
    last = [r for r in agent.history if "train/reward" in r][-1]
    again = [r for r in resumed.history if "train/reward" in r][-1]
    assert (
        again["train/reward"] == last["train/reward"] and again["train/loss"] == last["train/loss"]
    )


@pytest.mark.parametrize("credit", ["trajectory", "turn"])
def test_skipping_zero_advantage_rows_changes_the_work_not_the_update(
    tmp_path, monkeypatch, credit
):
    def first_group_flat(episodes):
        """The untrained model fails every episode alike: vary the second group's rewards."""
        per_turn = [[0.0] * len(e.turn_rewards) for e in episodes]
        for i in range(4, len(episodes)):
            per_turn[i][-1] = float(i % 4)
        return per_turn

    def train(skip: bool):
        agent = _tiny_agent(
            tmp_path, monkeypatch, credit=credit, skip_zero_advantage=skip, steps=3, group_size=4
        )
        agent.rewards = first_group_flat
        agent.learn(3)
        return agent, [r for r in agent.history if "train/loss" in r]

    (skipping, logs), (plain, plain_logs) = train(True), train(False)
    assert all(r["train/flat_groups"] == 0.5 for r in logs)  # rows to skip, rows to train
    for a, b in zip(skipping.model.parameters(), plain.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)  # Adam steps are ~3e-4
    for a, b in zip(logs, plain_logs, strict=True):
        assert a["train/loss"] == pytest.approx(b["train/loss"], rel=1e-4, abs=1e-6)
        assert a["train/grad_norm"] == pytest.approx(b["train/grad_norm"], rel=1e-4, abs=1e-6)


def test_agent_canaries_are_planted_counted_and_watched(tmp_path, monkeypatch):
    agent = _tiny_agent(tmp_path, monkeypatch, canaries={"share": 0.5})
    assert "threshold" in {m.kind for m in agent.monitors}
    agent.learn(1)
    record = next(r for r in agent.history if "train/reward" in r)
    assert record["integrity/canary_passes"] == 0  # an untrained model fools nothing
    assert agent.state_dict()["canary_passes"] == 0


def test_what_a_model_writes_cannot_hang_or_crash_the_tools():
    # 23 characters that would need gigabytes: refused before computing
    with pytest.raises(ValueError, match="over 4096 bits"):
        safe_eval("(((9**99)**99)**99)**99")
    assert safe_eval("9**99") == 9**99
    for body in ("[" * 100_000, '{"name": "c", "arguments": {"x": ' + "9" * 5000 + "}}"):
        assert parse_tool_call(f"<tool>{body}</tool>").error.startswith("malformed tool call")


def test_eval_every_0_evaluates_at_the_start_and_the_end(tmp_path, monkeypatch):
    from payoff.track.run import Run

    run = Run.create(tmp_path, "agent", {"algo": "agent_grpo"})
    agent = _tiny_agent(tmp_path, monkeypatch, eval_every=0, final_eval=True, run=run)
    agent.learn()
    run.close()
    evals = [r["step"] for r in run.records() if "eval/success" in r]
    assert evals == [0, 2]  # not the start's score reported as the end's
    with pytest.raises(ConfigError, match="'eval_every' must be >= 0"):
        _tiny_agent(tmp_path, monkeypatch, eval_every=-1)


def test_an_env_that_never_ends_its_episodes_is_stopped_past_its_turn_limit():
    """The rollout loops while any episode runs: an env whose step never says done looped on,
    a generate call a turn, without a word."""
    from payoff.core.errors import EnvError
    from payoff.envs.text.env import StepResult
    from payoff.models.lm import ModelConfig, load_lm
    from payoff.rollout.episodes import rollout_episodes
    from payoff.rollout.generation import LocalSampler, SamplingConfig

    class NeverDone(ToolEnv):
        def step(self, model_turn):
            return StepResult([{"role": "tool", "content": "more"}], 0.0, False, {})

    model, tokenizer = load_lm(ModelConfig(), seed=0)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=3)
    with pytest.raises(EnvError, match=r"NeverDone has not ended an episode after 3 turns"):
        rollout_episodes(
            LocalSampler(model, tokenizer),
            tokenizer,
            [{"question": "q", "answer": "1"}],
            lambda: NeverDone([calculator()], max_turns=2),
            PlainFormat(),
            sampling,
            torch.Generator().manual_seed(0),
            stop_ids=[],  # the random model's EOS would end it early
        )


# ---- tools a user brings --------------------------------------------------------------
def _user_tool(fn, **options):
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    return {"t": Tool("t", "a user's tool", schema, fn, **options)}


_CALL = '<tool>{"name": "t", "arguments": {"x": "a"}}</tool>'


def test_a_users_tool_failing_is_a_tool_error_not_the_models():
    def broken(x):
        raise RuntimeError("database down")

    def refuses(x):
        raise ToolInputError(f"no record {x!r}")

    result, status = run_tool_call(_user_tool(broken), parse_tool_call(_CALL))
    assert status == "tool_error" and result == "error: t: RuntimeError: database down"
    result, status = run_tool_call(_user_tool(refuses), parse_tool_call(_CALL))
    assert status == "malformed" and "no record 'a'" in result
    env = ToolEnv(list(_user_tool(broken).values()), max_turns=3)
    env.reset({"question": "q", "answer": "1"})
    info = env.step(_CALL).info
    assert info["tool_errors"] == 1 and info["malformed"] == 0 and not info["ok"]


def test_a_hanging_tool_times_out_and_a_huge_result_is_cut():
    import time

    started = time.perf_counter()
    result, status = run_tool_call(
        _user_tool(lambda x: time.sleep(30), timeout=0.2), parse_tool_call(_CALL)
    )
    assert status == "tool_error" and result == "error: t: timed out after 0.2 s"
    assert time.perf_counter() - started < 5
    result, status = run_tool_call(
        _user_tool(lambda x: "z" * 10_000_000, max_result_chars=100), parse_tool_call(_CALL)
    )
    assert status == "ok" and result == "z" * 100 + " ... [cut: 9,999,900 more characters]"


def test_a_tool_result_that_is_not_text_reads_as_json():
    result, status = run_tool_call(
        _user_tool(lambda x: {"rows": [1, 2], "when": Path("/tmp")}), parse_tool_call(_CALL)
    )
    assert status == "ok" and result == '{"rows": [1, 2], "when": "/tmp"}'
    assert run_tool_call(_user_tool(lambda x: 3.5), parse_tool_call(_CALL))[0] == "3.5"


def test_a_tool_that_exits_or_cannot_print_its_result_is_a_tool_error():
    class Unprintable:
        def __str__(self):
            raise RuntimeError("no")

    def exits(x):
        raise SystemExit(3)

    result, status = run_tool_call(_user_tool(exits), parse_tool_call(_CALL))
    assert status == "tool_error" and result == "error: t: SystemExit: 3"
    result, status = run_tool_call(_user_tool(lambda x: Unprintable()), parse_tool_call(_CALL))
    assert status == "tool_error" and "RuntimeError: no" in result
    assert run_tool_call(_user_tool(lambda x: b"caf\xc3\xa9"), parse_tool_call(_CALL))[0] == "café"
    with pytest.raises(ConfigError, match="max_result_chars must be >= 1"):
        _user_tool(str, max_result_chars=0)


def test_timed_out_calls_still_running_stop_a_tool_being_started(monkeypatch):
    import threading

    from payoff.envs.text import tools as tools_module

    monkeypatch.setattr(tools_module, "MAX_STRANDED", 2)
    monkeypatch.setattr(tools_module, "_stranded", {})  # other tests' calls still running
    release = threading.Event()
    hang = _user_tool(lambda x: release.wait(30), timeout=0.05)
    try:
        for _ in range(2):
            assert "timed out" in run_tool_call(hang, parse_tool_call(_CALL))[0]
        result, status = run_tool_call(hang, parse_tool_call(_CALL))
        assert status == "tool_error" and "2 earlier calls are still running" in result
    finally:
        release.set()


def test_sft_given_model_teaches_a_model_you_name_the_call_format_first(tmp_path):
    """sft.given_model: the model.path model learns the <tool> format from demonstrations
    (how SmolLM2, whose template lists no tools, becomes a calculator agent), cached by its
    path; without it the given model is the policy as it is."""
    from payoff.algos.agent_grpo import AgentGRPO
    from payoff.algos.sft import SFT
    from payoff.models.lm import ModelConfig, load_lm

    given = str(SFT(task={"name": "addition"}, steps=1).save_model(tmp_path / "given"))
    quick = {"steps": 1, "tasks_per_step": 2, "group_size": 2, "task": {"eval_size": 2}}
    sft = {
        "given_model": True,
        "demonstrations": 8,
        "steps": 3,
        "batch_size": 4,
        "learning_rate": 1e-5,
    }
    agent = AgentGRPO(model={"path": given}, sft=sft, **quick)
    assert agent.base_model_path != given and "agent-models" in agent.base_model_path
    before, _ = load_lm(ModelConfig(path=given))
    tuned, _ = load_lm(ModelConfig(path=agent.base_model_path))
    moved = [
        float((b - a).detach().norm() / a.detach().norm())
        for (_, a), (_, b) in zip(before.named_parameters(), tuned.named_parameters(), strict=True)
    ]
    # trained from the given weights (a fresh tiny model would be ~1.4 away), and trained
    assert max(moved) < 0.05 and max(moved) > 0, max(moved)
    assert tuned.config.hidden_size == before.config.hidden_size
    again = AgentGRPO(model={"path": given}, sft=sft, **quick)
    assert again.base_model_path == agent.base_model_path  # cached, keyed by the given path
    assert AgentGRPO(model={"path": given}, **quick).base_model_path == given
