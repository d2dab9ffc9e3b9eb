"""What users coming from SB3, Gymnasium and TRL try that no recipe does: other envs and
action shapes, SB3's calling habits, bad observations, rewards and settings, their own
models and reward functions. Each either works or stops with one message naming the bad
value and what would do."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import payoff
from payoff.algos.sft import SFT, build_base_model
from payoff.core.cache import cache_folder
from payoff.core.errors import ConfigError, DataError, EnvError
from payoff.envs.tasks import TaskConfig
from payoff.models.base_model import BaseModelConfig
from payoff.models.lean_forward import lm_forward
from payoff.models.lm import load_tokenizer
from payoff.rewards.base import RewardMix, RewardSpec
from payoff.train import resolve

TINY = {"num_envs": 2, "num_steps": 32, "minibatch_size": 32, "eval_every": 0}


class _Blank(gym.Env):
    """One-step-at-a-time env whose spaces the tests set."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space: gym.Space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, self.action_space.dtype)), action
        self.t += 1
        return np.zeros(3, np.float32), -float(np.abs(action).sum()), False, self.t >= 10, {}


class _Box22(_Blank):
    action_space = gym.spaces.Box(0.0, 5.0, (2, 2), np.float32)


class _Box0(_Blank):
    action_space = gym.spaces.Box(-1.0, 1.0, (), np.float32)


@pytest.mark.parametrize("env_class", [_Box22, _Box0])
@pytest.mark.parametrize("algo", [payoff.PPO, payoff.A2C])
def test_box_actions_of_any_shape_train_and_act_in_bounds(env_class, algo):
    settings = TINY if algo is payoff.PPO else {"num_envs": 2, "eval_every": 0}
    agent = algo(env_class(), **settings).learn(128)  # the env asserts every action's shape
    action, _ = agent.predict(np.zeros(3, np.float32))
    assert np.shape(action) == env_class.action_space.shape
    assert env_class.action_space.contains(np.asarray(action, np.float32))
    assert np.isfinite(agent.evaluate(2).mean_return)


def test_sb3_calling_habits_are_answered():
    with pytest.raises(ConfigError, match="no policy name to pass"):
        payoff.PPO("MlpPolicy", gym.make("CartPole-v1"))
    with pytest.raises(ConfigError, match="no policy name to pass"):  # was Python's TypeError
        payoff.PPO("MlpPolicy", env=gym.make("CartPole-v1"))
    with pytest.raises(ConfigError, match="no policy name to pass"):
        payoff.BC("MlpPolicy", env="CartPole-v1", expert="cartpole")
    agent = payoff.PPO("CartPole-v1", **TINY)
    agent.learn(total_timesteps=64)  # SB3's keyword
    assert agent.step >= 64
    agent.learn(64, progress_bar=False, reset_num_timesteps=False)  # what they mean here
    with pytest.raises(ConfigError, match="log_interval.*config keys.*learn\\(n\\) again"):
        agent.learn(64, log_interval=10)  # (callbacks: tests/test_learn_habits.py)


def test_predict_names_the_shape_or_state_it_expected():
    sac = payoff.SAC("Pendulum-v1", learning_starts=8, eval_every=0).learn(16)
    with pytest.raises(
        EnvError, match=r"shape \(3,\) or a batch of shape \(N, 3\).*got shape \(2,\)"
    ):
        sac.predict([1.0, 0.0])  # once read as a batch of two scalars
    actions, _ = sac.predict(np.zeros((4, 3)))
    assert actions.shape == (4, 1)
    ppo = payoff.PPO("CartPole-v1", **TINY)
    with pytest.raises(EnvError, match=r"got shape \(2, 2, 4\)"):
        ppo.predict(np.zeros((2, 2, 4)))
    with pytest.raises(EnvError, match=r"an empty batch \(shape \(0, 4\)\)"):
        ppo.predict(np.zeros((0, 4)))  # was torch's "cannot reshape tensor of 0 elements"
    dqn = payoff.DQN("FrozenLake-v1", learning_starts=8, eval_every=0).learn(16)
    table = payoff.QLearning("FrozenLake-v1").learn(3)
    for agent in (dqn, table):
        with pytest.raises(EnvError, match=r"state 16 is outside Discrete\(16\).*0\.\.15"):
            agent.predict(16)
        with pytest.raises(EnvError, match="state -1 is outside"):
            agent.predict(-1)
        actions, _ = agent.predict(np.array([0, 5]))
        assert actions.shape == (2,)  # a batch of states
        action, _ = agent.predict(3)
        assert isinstance(action, int)


def test_bad_settings_are_named():
    with pytest.raises(ConfigError, match="'env.max_episode_steps' must be > 0, or null"):
        payoff.PPO({"id": "CartPole-v1", "max_episode_steps": 0}, **TINY)
    with pytest.raises(ConfigError, match="evaluate\\(\\) takes a number of episodes >= 1"):
        payoff.PPO("CartPole-v1", **TINY).evaluate(0)
    with pytest.raises(ConfigError, match="'alpha' must be > 0 with autotune"):
        payoff.SAC("Pendulum-v1", alpha=0.0)
    # alpha 0 without autotune: SAC without its entropy bonus, as SB3 allows
    plain = payoff.SAC("Pendulum-v1", alpha=0.0, autotune=False, learning_starts=8, eval_every=0)
    plain.learn(24)
    assert float(plain.temperature.log_alpha.detach().exp()) == 0.0
    assert all(torch.isfinite(p).all() for p in plain.actor.parameters())
    with pytest.raises(EnvError, match="PPO or A2C"):  # not "continuous actions"
        payoff.DQN(_MultiDiscreteEnv())
    with pytest.raises(EnvError, match="PPO, A2C and REINFORCE"):  # not DQN, which refuses it too
        payoff.SAC(_MultiDiscreteEnv())


class _MultiDiscreteEnv(_Blank):
    action_space = gym.spaces.MultiDiscrete([2, 3])


def test_recurrent_ppo_runs_on_its_defaults():
    agent = payoff.RecurrentPPO("CartPole-v1", eval_every=0, num_envs=2)
    assert agent.config.minibatch_size % agent.config.num_steps == 0  # whole sequences
    assert agent.learn(256).step > 0
    from payoff.algos.recurrent_ppo import RecurrentPPOConfig

    built = payoff.RecurrentPPO(config=RecurrentPPOConfig(eval_every=0, num_envs=2))  # no validate
    assert built.learn(256).step > 0


class _WrongReset(_Blank):
    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}


class _OldGymReset(_Blank):
    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32)


class _ArrayReward(_Blank):
    def step(self, action):
        return np.zeros(3, np.float32), np.array([1.0, 2.0]), False, False, {}


def test_env_mistakes_are_explained_at_reset_and_step():
    with pytest.raises(EnvError, match=r"in reset during the first reset.*observation_space"):
        payoff.PPO(_WrongReset(), **TINY)
    with pytest.raises(EnvError, match="an observation alone from reset"):
        payoff.PPO(_OldGymReset(), **TINY)
    with pytest.raises(EnvError, match="reward as a float, not an array"):
        payoff.PPO(_ArrayReward(), **TINY).learn(64)


def test_a_recipe_pointed_at_another_env_leaves_its_env_settings_behind():
    _, config, resolved = resolve("frozenlake-q", ["env.id=CliffWalking-v1"])
    assert config.env.kwargs == {} and "env.kwargs" in resolved["recipe_note"]
    assert config.env.id == "CliffWalking-v1"
    _, config, _ = resolve("pendulum-sac", [f"env.entry_point={__name__}:_Box22"])
    assert config.env.id == f"{__name__}:_Box22"  # not the recipe's Pendulum-v1
    _, config, resolved = resolve(
        "frozenlake-q", ["env.id=CliffWalking-v1", "env.kwargs.is_slippery=true"]
    )
    assert config.env.kwargs == {"is_slippery": True}  # yours, without the recipe's map_name
    _, config, resolved = resolve("cartpole-ppo", ["env={id: Acrobot-v1}", "num_envs=4"])
    assert config.num_envs == 4 and config.total_steps == payoff.PPO.config_class().total_steps
    assert "tuned for CartPole-v1" in resolved["recipe_note"]  # a whole env mapping retargets too
    _, same, resolved = resolve("frozenlake-q", ["env.kwargs.map_name=8x8"])
    assert same.env.kwargs == {"map_name": "8x8", "is_slippery": True}
    assert "recipe_note" not in resolved


def test_a_run_records_the_paths_it_was_given_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    (tmp_path / "my_rewards.py").write_text(
        "def short(prompts, completions, **kw):\n    return [1.0] * len(completions)\n"
    )
    overrides = ["task.name=jsonl", "task.data=rows.jsonl", "rewards=[{name: my_rewards.py:short}]"]
    _, _, resolved = resolve("arithmetic-grpo", overrides)
    assert resolved["task"]["data"] == str(tmp_path / "rows.jsonl")
    assert resolved["rewards"][0]["name"] == f"{tmp_path / 'my_rewards.py'}:short"
    _, config, _ = resolve("kart-bc", [])
    assert config.expert == "kart"  # a name, not a path, stays as written


# ---- language models ----------------------------------------------------------------------
def _gpt2(folder, tokenizer=True, eos=True, positions=32, pad=False, bos=False):
    """A tiny GPT-2 (learned positions, unlike payoff's Llama) with a character tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {chr(c): i for i, c in enumerate(range(32, 127))}
    vocab["<eos>"], vocab["<unk>"] = len(vocab), len(vocab) + 1
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    backend.decoder = decoders.Fuse()
    special = {"eos_token": "<eos>"} if eos else {}
    if pad:
        special["pad_token"] = "<unk>"
    if bos:  # Llama's, Mistral's and Gemma's tokenizers put BOS before every text
        from tokenizers import processors

        vocab["<s>"] = len(vocab)
        backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
        backend.decoder = decoders.Fuse()
        backend.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", vocab["<s>"])]
        )
        special["bos_token"] = "<s>"
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", **special)
    config = GPT2Config(
        n_layer=1, n_head=2, n_embd=16, n_positions=positions, vocab_size=len(vocab)
    )
    model = GPT2LMHeadModel(config)
    model.save_pretrained(folder)
    if tokenizer:
        tok.save_pretrained(folder)
    return model


def test_model_folders_without_a_usable_tokenizer_are_refused(tmp_path):
    _gpt2(tmp_path / "weights-only", tokenizer=False)
    with pytest.raises(ConfigError, match="encodes text to nothing: the folder has no tokenizer"):
        load_tokenizer(tmp_path / "weights-only")
    _gpt2(tmp_path / "no-eos", eos=False)
    with pytest.raises(ConfigError, match="has no eos token: payoff ends every completion"):
        load_tokenizer(tmp_path / "no-eos")
    # a pad token but no eos: SFT crashed and GRPO sampled to max_new_tokens, training nothing
    _gpt2(tmp_path / "pad-no-eos", eos=False, pad=True)
    with pytest.raises(ConfigError, match=r"has no eos token \(its pad token is '<unk>'\)"):
        load_tokenizer(tmp_path / "pad-no-eos")
    _gpt2(tmp_path / "ok")
    assert load_tokenizer(tmp_path / "ok").pad_token == "<eos>"  # eos pads when pad is missing
    # a folder that is no model at all, and a Hub id (never downloaded)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hi")
    with pytest.raises(ConfigError, match="has no config.json, so it is not a Hugging Face"):
        load_tokenizer(tmp_path / "notes")
    with pytest.raises(ConfigError, match="payoff never downloads: a Hugging Face Hub id"):
        load_tokenizer("Qwen/Qwen2.5-0.5B")


def test_sequences_past_a_models_context_or_vocabulary_are_named():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(
        GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=32, vocab_size=50)
    )
    ids = torch.ones(2, 40, dtype=torch.long)
    mask, positions = torch.ones_like(ids), torch.arange(40).expand(2, 40)
    with pytest.raises(ConfigError, match="reached 40 tokens, past the 32 positions .*gpt2"):
        lm_forward(model, ids, mask, positions)
    with pytest.raises(ConfigError, match="token id 77 is past the model's vocabulary of 50"):
        lm_forward(
            model, torch.full((1, 4), 77), torch.ones(1, 4, dtype=torch.long), positions[:1, :4]
        )


def test_a_context_too_short_for_prompt_plus_max_new_tokens_is_refused_before_training(
    tmp_path,
):
    from payoff.algos.grpo import GRPO

    _gpt2(tmp_path / "gpt2", positions=32)  # learned positions: nothing past 32 embeds
    model = {"path": str(tmp_path / "gpt2")}
    with pytest.raises(ConfigError, match=r"max_new_tokens is 40: .* past the 32 .*\(gpt2\) can"):
        GRPO(model=model, max_new_tokens=40, steps=1)
    assert GRPO(model=model, max_new_tokens=8, steps=1).model.config.n_positions == 32
    # one row past the context: named, and not "lower max_new_tokens to 0 or less"
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(20)]
    rows[7]["prompt"] = "1+" * 20 + "1="
    with pytest.raises(
        ConfigError, match=r"a training row of task .* \('1\+1\+.* is 42 tokens.*Shorten or drop"
    ):
        GRPO(model=model, task=rows, max_new_tokens=4, steps=1)
    # DPO and reward models check their pairs (they failed with an IndexError mid-run)
    from payoff.algos.dpo import DPO
    from payoff.algos.reward_model import RewardModel

    pairs = [{"prompt": r["prompt"], "chosen": r["answer"], "rejected": "0"} for r in rows]
    for algo in (DPO, RewardModel):
        with pytest.raises(ConfigError, match=r"a training pair .* is 44 tokens.* past the 32"):
            algo(model=model, preferences=pairs, steps=1)
    # short pairs of your own, but the task DPO evaluates on is longer: it says whose row
    # that is (the message quoted a row that was in none of the user's data)
    short = _gpt2(tmp_path / "short", positions=12)
    del short
    few = [{"prompt": f"{a}+1", "chosen": str(a + 1), "rejected": "0"} for a in range(20)]
    with pytest.raises(ConfigError, match=r"of task 'styled_addition'.*your pairs train it"):
        DPO(model={"path": str(tmp_path / "short")}, preferences=few, steps=1)


def test_a_rotary_model_is_held_to_the_context_it_was_trained_for(tmp_path):
    # one 400k-character prompt asked a Llama for a 160 GB attention matrix
    from transformers import LlamaConfig, LlamaForCausalLM

    from payoff.algos.grpo import GRPO

    _gpt2(tmp_path / "llama")  # for its tokenizer
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=48,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path / "llama")
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(20)]
    rows[3]["prompt"] = "1+" * 500 + "1="
    with pytest.raises(
        ConfigError,
        match=r"a training row .* 1002 tokens.* past the 48 this model \(llama\) was trained for",
    ):
        GRPO(model={"path": str(tmp_path / "llama")}, task=rows, max_new_tokens=4, steps=1)


def test_a_reward_model_scores_a_sequence_past_its_context_on_its_last_tokens(tmp_path, capsys):
    from payoff.models.lm import ModelConfig
    from payoff.rewards.learned import build_scalar_model

    _gpt2(tmp_path / "gpt2", positions=32)
    scorer = build_scalar_model(ModelConfig(path=str(tmp_path / "gpt2")))
    long, tail = scorer.score_batched(["x" * 20, "x" * 9], ["1" * 30, "1" * 30])
    assert "scored on their last 32 tokens" in capsys.readouterr().err
    assert torch.isfinite(long) and long == tail  # the same last 32 tokens, the same score


def test_reward_functions_returning_inf_or_needing_a_missing_column_are_named(capsys):
    def infinite_for_c(prompts, completions, **kwargs):
        return [float("-inf") if c == "c" else 1.0 for c in completions]

    result = RewardMix([RewardSpec.from_value(infinite_for_c)])(["p", "q"], ["c", "d"])
    assert result.total == [0.0, 1.0]  # the infinite row scores on_error, the run goes on
    assert result.errors == {"infinite_for_c": 1} and "must be finite" in capsys.readouterr().err

    def wants_difficulty(prompts, completions, difficulty, **kwargs):
        return [1.0] * len(completions)

    with pytest.raises(ConfigError, match=r"needs \['difficulty'\].*Add the missing column"):
        RewardMix([RewardSpec.from_value(wants_difficulty)])(["p"], ["c"])

    def decorated(*args, **kwargs):  # what a plain decorator's wrapper looks like
        return [2.0] * len(kwargs["completions"])

    assert RewardMix([RewardSpec.from_value(decorated)])(["p"], ["c"]).total == [2.0]


def test_ctrl_c_while_pretraining_a_base_caches_nothing(monkeypatch):
    def interrupted_learn(self, total=None):
        self.interrupted = True  # as the loop leaves it after a first Ctrl-C
        return self

    monkeypatch.setattr(SFT, "learn", interrupted_learn)
    models = cache_folder("base-models", "addition", {}).parent
    built_before = sorted(models.glob("*/config.json"))
    with pytest.raises(KeyboardInterrupt):
        build_base_model(TaskConfig(name="addition"), BaseModelConfig(steps=3, seed=12345))
    assert sorted(models.glob("*/config.json")) == built_before  # no half-trained base cached


def test_sft_on_text_rows_trains_to_the_end_and_a_bom_is_read(tmp_path):
    from payoff.envs.tasks import make_task

    data = tmp_path / "text.jsonl"
    rows = [json.dumps({"text": f"the number {i} follows {i - 1}."}) for i in range(40)]
    data.write_text("\ufeff" + "\n".join(rows) + "\n", encoding="utf-8")  # as Notepad saves it
    task = TaskConfig(name="jsonl", data=str(data))
    assert len(make_task(task).train_rows) > 30
    _gpt2(tmp_path / "gpt2", positions=64)
    sft = payoff.SFT(
        model={"path": str(tmp_path / "gpt2")}, task=task, steps=2, eval_every=1, batch_size=4
    )
    assert sft.learn().step == 2  # no held-out accuracy to score, and no error at the end


class _NoRenderMode(_Blank):
    def __init__(self):  # no render_mode argument
        super().__init__()


def test_an_env_without_render_mode_is_told_how_to_make_gifs(tmp_path):
    agent = payoff.PPO(_NoRenderMode(), **TINY)
    with pytest.raises(EnvError, match="does not render RGB frames .*render_mode=None argument"):
        agent.record_gif(tmp_path / "x.gif")
    from payoff.rollout.evaluate import _frame

    def unsupported():
        raise NotImplementedError

    # it raised: it did not "give NoneType"
    with pytest.raises(EnvError, match=r"render\(\) raised NotImplementedError"):
        _frame(unsupported, "my_envs:X")


def test_load_takes_config_keys_like_the_constructor(tmp_path):
    agent = payoff.PPO("CartPole-v1", **TINY).learn(64)
    agent.save(tmp_path / "a.safetensors")
    again = payoff.PPO.load(tmp_path / "a.safetensors", eval_every=128)
    assert again.config.eval_every == 128 and again.step == agent.step
    action, _ = again.predict(np.zeros(4, np.float32))
    assert action == agent.act(np.zeros(4, np.float32))
    with pytest.raises(
        ConfigError,
        match=r"PPO.load\(\) got unknown config key\(s\) \[.learning_rat.\].*learning_rate",
    ):
        payoff.PPO.load(tmp_path / "a.safetensors", learning_rat=1e-3)


def test_a_reward_model_on_your_own_pairs_reports_no_gold_accuracy():
    from payoff.algos.reward_model import PairEval

    own = PairEval(60, 0.7, float("nan"), 0.4, 0.0, [0.7], 0.1)
    assert "gold" not in own.line() and "nan" not in own.line()
    assert "0.900 (vs gold)" in PairEval(60, 0.7, 0.9, 0.4, 0.0, [0.7], 0.1).line()


def test_dpo_takes_preference_pairs_from_python():
    from payoff.algos.dpo import DPOConfig
    from payoff.core.config import from_dict
    from payoff.envs.tasks import make_task
    from payoff.envs.tasks.preferences import load_pairs

    pairs = [{"prompt": f"hi {i}", "chosen": "hello!", "rejected": "go away"} for i in range(20)]
    config = from_dict(DPOConfig, {"preferences": pairs})
    assert config.preferences.own and not config.preferences.path
    train, test = load_pairs(config.preferences, make_task(config.task), seed=0)
    assert (len(train), len(test)) == (18, 2) and test[0]["chosen"] == "hello!"
    with pytest.raises(ConfigError, match="passed from Python.*pass them again"):
        saved = from_dict(DPOConfig, {"preferences": {"from_python": True}})  # as a file holds it
        load_pairs(saved.preferences, make_task(saved.task), seed=0)
    with pytest.raises(payoff.core.errors.DataError, match=r"rows\[1\]"):
        bad = from_dict(DPOConfig, {"preferences": [pairs[0], {"prompt": "x", "chosen": "y"}]})
        load_pairs(bad.preferences, make_task(bad.task), seed=0)


def test_a_datasetdicts_validation_split_is_held_out_and_no_held_out_rows_fail_early():
    from datasets import Dataset, DatasetDict

    from payoff.envs.tasks import make_task

    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(50)]
    splits = DatasetDict(
        {"train": Dataset.from_list(rows[:40]), "validation": Dataset.from_list(rows[40:])}
    )
    task = make_task(TaskConfig.from_value(splits))
    assert (len(task.train_rows), len(task.test_rows)) == (40, 10)
    # what GRPO(task=splits) and DPO(preferences=splits) do with it: a DatasetDict is a
    # dict, and was read as config keys ('unknown config key task.train')
    from payoff.algos.dpo import DPOConfig
    from payoff.algos.grpo import GRPOConfig
    from payoff.core.config import from_dict

    assert from_dict(GRPOConfig, {"task": splits}).task.dataset is splits
    pairs = [{"prompt": f"{i}+1=", "chosen": str(i + 1), "rejected": str(i)} for i in range(4)]
    pair_splits = DatasetDict(
        {"train": Dataset.from_list(pairs[:3]), "test": Dataset.from_list(pairs[3:])}
    )
    assert from_dict(DPOConfig, {"preferences": pair_splits}).preferences.dataset is pair_splits
    with pytest.raises(ConfigError, match="split 'test' has no rows"):  # before any pretraining
        payoff.GRPO(task=[rows[0]] * 3, steps=1)


def test_a_long_evaluation_shows_a_bar_a_short_one_none():
    from payoff.track.progress import LateProgress

    quick = LateProgress(4, "evaluating", after=60.0)
    for _ in range(1000):
        quick.tick(1)
    assert quick._bar is None  # a blink: no bar
    slow = LateProgress(4, "evaluating", after=0.0)
    for _ in range(300):
        slow.tick(1, finished=int(_ == 100))
    assert slow._bar is not None and slow.steps == 300 and slow.done == 1
    slow.close()


def test_a_batched_evaluation_whose_episodes_end_together_moves_its_bar_by_steps():
    # 50 CarRacing episodes all end at the 1,000-step limit: a bar of episodes would sit
    # at 0% for minutes, then jump to 100%
    from payoff.envs.make import EnvConfig
    from payoff.rollout.vector import episode_limit, make_vector_env
    from payoff.track.progress import LateProgress

    for config, limit in (
        (EnvConfig(id="CartPole-v1"), 500),
        (EnvConfig(id="CartPole-v1", max_episode_steps=50), 50),
    ):
        envs = make_vector_env(config, 2, "sync")
        assert episode_limit(envs) == limit
        envs.close()
    bar = LateProgress(3, "evaluating", after=0.0, episode_steps=10)
    for step in range(256):  # the bar appears at the 256th call; all three run 8 steps
        bar.tick(3 if step < 8 else 0, finished=3 * (step == 7), unused=3 * 2 * (step == 7))
    assert bar._bar is not None and bar._bar._bar.total == 30
    assert bar.count == 30 and bar._bar._bar.n == 30 and bar.done == 3 and bar.steps == 24
    bar.close()


def test_yaml_reads_3e_4_as_a_number_and_an_experiment_checks_every_member_first(tmp_path):
    from payoff.core.config import load_yaml
    from payoff.train import train_experiment

    recipe = tmp_path / "mine.yaml"
    recipe.write_text("algo: ppo\nenv: {id: CartPole-v1}\ntotal_steps: 2e3\nlearning_rate: 3e-4\n")
    assert load_yaml(recipe)["learning_rate"] == 3e-4
    _, config, _ = resolve(str(recipe), [])
    assert config.learning_rate.start == 3e-4 and config.total_steps == 2000
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "kind: experiment\nmembers:\n  - {recipe: cartpole-ppo, seeds: [0]}\n"
        "  - {recipe: cartpole-ppo, overrides: [total_stepz=2000], seeds: [0]}\n"
    )
    with pytest.raises(
        ConfigError, match="member 'cartpole-ppo': unknown config key 'total_stepz'"
    ):
        train_experiment(str(experiment), out=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()  # nothing trained, nothing written
    # labels name which of two members of one recipe is wrong, before and while training
    experiment.write_text(
        "kind: experiment\nmembers:\n  - {recipe: frozenlake-q, seeds: [0], label: A}\n"
        "  - {recipe: frozenlake-q, overrides: [gamma=2], seeds: [0], label: B}\n"
    )
    with pytest.raises(ConfigError, match="member 'B' \\(recipe 'frozenlake-q'\\): "):
        train_experiment(str(experiment), out=tmp_path / "runs")
    experiment.write_text(
        "kind: experiment\nmembers:\n  - {recipe: frozenlake-q, seeds: [0], label: A}\n"
        "  - {recipe: frozenlake-q, overrides: [env.kwargs.map_name=9x9], seeds: [3], label: B}\n"
    )
    with pytest.raises(EnvError, match="member 'B' \\(recipe 'frozenlake-q'\\) \\(seed 3\\): "):
        train_experiment(
            str(experiment), ["total_episodes=20"], out=tmp_path / "runs2", media=False
        )


def test_plot_names_a_metric_no_run_logged(tmp_path, capsys):
    from payoff.cli import main

    assert (
        main(["train", "cartpole-ppo", "total_steps=512", "--no-media", "--out", str(tmp_path)])
        == 0
    )
    (run,) = tmp_path.iterdir()
    assert (
        main(["plot", str(run), "--metric", "eval/mean_retrun", "--out", str(tmp_path / "p.png")])
        == 2
    )
    assert "no run logged 'eval/mean_retrun'" in capsys.readouterr().err


def test_openings_longer_than_the_game_are_refused_before_training():
    from payoff.algos.alphazero import AlphaZero

    with pytest.raises(ConfigError, match="'final_eval_openings' is 9, but no 9 random plies"):
        AlphaZero(game="tictactoe", final_eval_openings=9)
    with pytest.raises(ConfigError, match="'selfplay_openings' is 12"):
        AlphaZero(game="tictactoe", selfplay_openings=12)
    AlphaZero(game="tictactoe", final_eval_openings=3, selfplay_openings=4)


def test_monitors_from_the_command_line_and_a_monitor_that_watched_nothing(tmp_path, capsys):
    from payoff.cli import main
    from payoff.track.run import Run

    monitors = "monitors=[{kind: threshold, key: train/entropyy, below: 0.1}]"
    args = ["train", "cartpole-ppo", "total_steps=512", monitors, "--no-media"]
    assert main([*args, "--out", str(tmp_path)]) == 0
    said = capsys.readouterr().err
    assert "monitor 'threshold' watches 'train/entropyy', which this run never logged" in said
    assert "Did you mean 'train/entropy'" in said
    (run,) = tmp_path.iterdir()
    events = [r["event"] for r in Run.open(run).events()]
    events = [e for e in events if e["kind"] == "monitor_unfed"]
    assert len(events) == 1 and "train/entropyy" in events[0]["message"]
    _, _, resolved = resolve("boatrace-ppo", ["monitors.0.window=7"])
    assert resolved["monitors"][0]["window"] == 7
    assert "monitors" not in resolve("boatrace-ppo", ["monitors=[]"])[2]
    with pytest.raises(ConfigError, match="monitors.N.key=value, with N one of the recipe's"):
        resolve("boatrace-ppo", ["monitors.3.window=7"])


def test_plot_keeps_runs_with_different_settings_apart(tmp_path):
    from payoff.report.plots import _group_label
    from payoff.track.run import Run

    def run(name: str, overrides: list[str], label: str | None = None) -> Run:
        config = {"recipe": "cartpole-ppo", "overrides": overrides, "algo": "ppo"}
        if label:
            config["label"] = label
        return Run.create(tmp_path, name, config)

    seed0 = run("a", ["seed=0"])
    seed1 = run("b", ["seed=1"])
    other = run("c", ["learning_rate=0.001", "seed=0"])
    assert _group_label(seed0) == _group_label(seed1) == "cartpole-ppo"
    assert _group_label(other) == "cartpole-ppo learning_rate=0.001"
    assert _group_label(run("d", ["learning_rate=0.001"], label="slow")) == "slow"


def test_lora_finds_the_linear_layers_of_any_architecture():
    # The default used to name Llama's layers only: a GPT-2 model found none of them
    from transformers import GPT2Config, GPT2LMHeadModel

    from payoff.models.lm import ModelConfig, add_lora

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    with warnings.catch_warnings():  # peft's "fan_in_fan_out is set to False ... Conv1D"
        warnings.simplefilter("error")
        model = add_lora(gpt2, ModelConfig(lora_rank=4))
    trained = {
        n.split(".lora_")[0].rsplit(".", 1)[-1]
        for n, p in model.named_parameters()
        if p.requires_grad
    }
    assert trained == {"c_attn", "c_proj", "c_fc"}
    with pytest.raises(ConfigError, match=r"model.lora_targets \['q_proj'\] name no module"):
        add_lora(GPT2LMHeadModel(gpt2.config), ModelConfig(lora_rank=4, lora_targets=["q_proj"]))
    # one misspelt name among good ones was dropped without a word
    with pytest.raises(ConfigError, match=r"model.lora_targets \['c_atn'\] name no module"):
        add_lora(
            GPT2LMHeadModel(gpt2.config), ModelConfig(lora_rank=4, lora_targets=["c_attn", "c_atn"])
        )
    # GPT-2 ties its head to its input embeddings: an adapter there, merged, changed both
    with pytest.raises(ConfigError, match="ties its output head to its input embeddings"):
        add_lora(
            GPT2LMHeadModel(gpt2.config),
            ModelConfig(lora_rank=4, lora_targets=["c_attn", "lm_head"]),
        )


def test_load_settings_change_only_what_they_name():
    # GRPO.load(path, task=rows) used to reset the saved task's eval_size to its default
    from payoff.algos.base import _onto_saved
    from payoff.algos.grpo import GRPOConfig
    from payoff.core.config import to_dict

    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(20)]
    saved = to_dict(GRPOConfig(task=TaskConfig(name="jsonl", eval_size=7)))
    task = _onto_saved(GRPOConfig, saved, {"task": rows})["task"]
    assert task.eval_size == 7 and task.dataset is rows and task.name == "jsonl"
    assert _onto_saved(GRPOConfig, saved, {"task": {"eval_size": 9}})["task"] == {
        **saved["task"],
        "eval_size": 9,
    }
    built_in = to_dict(GRPOConfig(task=TaskConfig(name="addition", options={"digits": 2})))
    assert _onto_saved(GRPOConfig, built_in, {"task": rows})["task"] is rows  # another kind
    mine = {"name": "jsonl", "data": "mine.jsonl"}
    assert _onto_saved(GRPOConfig, built_in, {"task": mine})["task"] == mine  # not merged
    files = {**saved, "task": {**saved["task"], "data": "/gone/a.jsonl", "test_data": "/gone/b"}}
    task = _onto_saved(GRPOConfig, files, {"task": rows})["task"]
    assert (task.data, task.test_data, task.eval_size) == ("", "", 7)  # the rows replace them


def test_ctrl_c_in_the_final_evaluation_keeps_the_training(tmp_path, monkeypatch, capsys):
    # The final evaluation ran after the last checkpoint: Ctrl-C there lost the whole run
    from payoff.algos.dqn import DQN
    from payoff.cli import main
    from payoff.track.run import Run

    def interrupted(self):  # Ctrl-C (a KeyboardInterrupt) during the final evaluation
        raise KeyboardInterrupt

    monkeypatch.setattr(DQN, "finish", interrupted)
    args = ["train", "cartpole-dqn", "total_steps=600", "learning_starts=100", "--no-media"]
    assert main([*args, "--out", str(tmp_path)]) > 128  # 128 + the signal
    (run,) = tmp_path.iterdir()
    assert "checkpoint saved. Continue with: payoff train --resume" in capsys.readouterr().out
    assert Run.open(run).checkpoint_path().exists() and "final_eval" not in Run.open(run).summary()
    monkeypatch.undo()
    assert main(["train", "--resume", str(run), "--no-media"]) == 0
    assert Run.open(run).summary()["final_eval"]["episodes"] > 0


def test_plot_draws_the_metric_most_runs_log_and_names_every_group(tmp_path):
    from PIL import Image

    from payoff.report.plots import default_metrics, plot_curves
    from payoff.track.run import Run

    runs = []
    for i in range(12):  # twelve settings; run 0 stopped before its first evaluation
        run = Run.create(tmp_path, f"r{i}", {"recipe": "cartpole-dqn", "overrides": [f"lr={i}"]})
        run.log(100, **({"train/loss": 1.0} if i == 0 else {"eval/mean_return": float(i)}))
        run.close()
        runs.append(run)
    assert default_metrics(runs) == ["eval/mean_return"]  # not refused for run 0's lack of it
    path = plot_curves(runs, tmp_path / "curves.png")
    assert Image.open(path).size[0] < 1500  # the title no longer lists every setting


def test_resume_refuses_what_it_cannot_honour_and_says_when_config_yaml_was_edited(
    tmp_path, monkeypatch
):
    import yaml

    from payoff.algos.dqn import DQN
    from payoff.cli import main

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(DQN, "finish", interrupted)  # stopped in its final evaluation
    args = ["train", "cartpole-dqn", "total_steps=400", "learning_starts=100", "--no-media"]
    assert main([*args, "--out", str(tmp_path)]) > 128
    monkeypatch.undo()
    (run,) = tmp_path.iterdir()
    assert main(["train", "--resume", str(run), "--seed", "5"]) == 2
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "total_steps": 9999}))
    with pytest.warns(RuntimeWarning, match="differs from the checkpoint's config in total_steps"):
        assert main(["train", "--resume", str(run), "--no-media", "--track", "none"]) == 0


def test_a_runs_config_yaml_trains_again_as_a_recipe(tmp_path):
    """getting-started calls config.yaml the fully resolved config; training it again said
    "unknown config key 'recipe'. Did you mean 'clip'?"."""
    import shutil

    from payoff.train import train

    first = train(
        "frozenlake-q", ["total_episodes=50", "final_eval_episodes=5"], out=tmp_path, media=False
    )
    recipe = tmp_path / "again.yaml"
    shutil.copy(first.path / "config.yaml", recipe)
    again = train(str(recipe), out=tmp_path / "again", media=False)
    ours = {k: v for k, v in again.config.items() if k not in ("recipe", "overrides")}
    theirs = {k: v for k, v in first.config.items() if k not in ("recipe", "overrides")}
    assert ours == theirs and again.summary()["final_eval"] == first.summary()["final_eval"]
    assert again.path.name.endswith("-again")  # a YAML file is named by its file name
    # the run's own config.yaml is named as that run was ("config" escaped runs/*frozenlake-q)
    rerun = train(str(first.path / "config.yaml"), out=tmp_path / "rerun", media=False)
    assert rerun.path.name.endswith("-frozenlake-q"), rerun.path.name


class _Pixels(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 1.0, False, True, {}


def test_raw_pixels_into_an_mlp_are_warned_about():
    # a bright-vs-dark task learned at chance from 0..255 and perfectly from [0, 1]
    with pytest.warns(RuntimeWarning, match="uint8 images, flattened into an MLP as 0..255"):
        payoff.PPO(_Pixels(), num_envs=2, num_steps=8, minibatch_size=8)
    grid = _Pixels()
    grid.observation_space = gym.spaces.Box(0, 1, (6, 6), np.uint8)  # an occupancy grid
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        payoff.PPO(_Pixels(), num_envs=2, num_steps=8, minibatch_size=8)  # said once already
        payoff.PPO(grid, num_envs=2, num_steps=8, minibatch_size=8)  # 0/1 cells: no pixels
    assert not [w for w in caught if "uint8 images" in str(w.message)]
    continuous = _Pixels()  # SAC's and TD3's networks read them raw too
    continuous.observation_space = gym.spaces.Box(0, 255, (4, 4, 3), np.uint8)
    continuous.action_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    with pytest.warns(RuntimeWarning, match="uint8 images, flattened into an MLP"):
        payoff.SAC(continuous, hidden=[8])


def test_small_command_line_habits(tmp_path, capsys):
    from payoff.cli import main

    _, config, resolved = resolve("cartpole-ppo", ["env.wrappers=[FlattenObservation]"])
    assert config.env.wrappers[0].name == "FlattenObservation"  # a bare name is a wrapper
    assert resolved["env"]["wrappers"] == [{"name": "FlattenObservation", "kwargs": {}}]
    with pytest.raises(ConfigError, match="two seeds: seed=3 among the overrides and 4"):
        resolve("cartpole-ppo", ["seed=3"], seed=4)
    assert resolve("cartpole-ppo", ["seed=3"], seed=3)[1].seed == 3
    (tmp_path / "afile").write_text("")
    assert main(["train", "cartpole-ppo", "--out", str(tmp_path / "afile")]) == 2
    assert "it is a file, not a folder" in capsys.readouterr().err


def test_an_agent_trained_on_a_python_env_asks_for_it_again_on_load(tmp_path):
    agent = payoff.PPO(_Pixels(), normalize_obs=True, **TINY)
    agent.learn(64)
    path = agent.save(tmp_path / "pixels.safetensors")
    with pytest.raises(EnvError, match=r"trained on a Python env \(.*_Pixels.*env=\.\.\."):
        payoff.PPO.load(path)  # 'module:_Pixels' is not a registered id to rebuild it from
    loaded = payoff.PPO.load(path, env=_Pixels())
    action, _ = loaded.predict(_Pixels().observation_space.sample())
    assert action in (0, 1)
    assert payoff.PPO.load(path, env=lambda: _Pixels()).config.env.python_env


def test_dropout_is_off_while_rl_and_preference_losses_train_and_on_for_sft(tmp_path):
    # GPT-2's default dropout (0.1) made GRPO's own samples look off-policy (mismatch_kl
    # 0.002 on synchronous sampling), the KL non-zero at step 1 and DPO's first margin non-zero
    from payoff.algos.dpo import DPO
    from payoff.algos.grpo import GRPO
    from payoff.algos.sft import SFT

    _gpt2(tmp_path / "gpt2")
    model = {"path": str(tmp_path / "gpt2")}
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(6) for b in range(6)]
    grpo = GRPO(
        model=model,
        task=rows,
        steps=2,
        prompts_per_step=4,
        group_size=4,
        max_new_tokens=4,
        eval_every=0,
        beta=0.1,
        learning_rate=1e-9,
    )
    assert all(m.p == 0.0 for m in grpo.model.modules() if isinstance(m, torch.nn.Dropout))
    grpo.learn()
    record = next(r for r in grpo.history if "train/mismatch_kl" in r)
    assert abs(record["train/mismatch_kl"]) < 1e-5 and abs(record["train/kl"]) < 1e-5
    pairs = [
        {"prompt": r["prompt"], "chosen": r["answer"], "rejected": "9" + r["answer"]} for r in rows
    ]
    dpo = DPO(model=model, preferences=pairs, steps=1, batch_size=4, eval_every=0, log_every=1)
    dpo.learn()
    first = next(r for r in dpo.history if "train/loss" in r)
    assert first["train/loss"] == pytest.approx(np.log(2), abs=1e-5)  # the policy is its reference
    sft = SFT(model=model, task=rows, steps=1)
    assert {m.p for m in sft.model.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}


def test_reward_functions_get_trls_conversational_forms_on_chat_rows():
    # TRL's documented pattern for conversational data: completion[0]["content"]
    def length(prompts, completions, **kwargs):
        assert prompts[0][-1] == {"role": "user", "content": "2+2?"}
        return [float(len(completion[0]["content"])) for completion in completions]

    def exact_text(prompts, completions, answer, **kwargs):  # payoff's own read text
        return [float(c == a) for c, a in zip(completions, answer, strict=True)]

    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    columns = {"answer": ["4", "4"], "prompt_messages": [chat, chat]}
    mix = RewardMix([RewardSpec.from_value(length), RewardSpec(name="exact")])
    result = mix(["system: Be brief.\nuser: 2+2?\nassistant: "] * 2, ["4", "four"], **columns)
    assert result.scores["length"] == [1.0, 4.0] and result.scores["exact"] == [1.0, 0.0]
    plain = RewardMix([RewardSpec.from_value(exact_text)])(["2+2="], ["4"], answer=["4"])
    assert plain.total == [1.0]  # text rows: text, as before

    def either(prompts, completions, **kwargs):  # a batch mixing chat and plain rows
        return [float(isinstance(c, list)) for c in completions]

    mixed = RewardMix([RewardSpec.from_value(either)])(
        ["user: 2+2?\nassistant: ", "2+2="], ["4", "4"], prompt_messages=[chat, None]
    )
    assert mixed.total == [1.0, 0.0]  # each row in its own form


def test_a_run_evaluates_after_its_reward_file_is_gone_and_refuses_to_train(tmp_path):
    # `payoff eval RUN` stopped at "reward file ... does not exist", though evaluation is
    # the verifier's; training on needs the file
    from payoff.algos.grpo import GRPO
    from payoff.track.run import Run

    _gpt2(tmp_path / "gpt2")
    rewards = tmp_path / "mine.py"
    rewards.write_text(
        "def short(prompts, completions, **kw):\n    return [1.0] * len(completions)\n"
    )
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(20)]
    run = Run.create(tmp_path, "grpo", {"algo": "grpo"})
    GRPO(
        run=run,
        model={"path": str(tmp_path / "gpt2")},
        task=rows,
        steps=1,
        rewards=[{"name": f"{rewards}:short"}],
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=2,
        eval_every=0,
        final_eval_k=[1],
    ).learn()
    run.close()
    rewards.unlink()
    loaded = GRPO.load(run.path, task=rows)
    assert loaded.evaluate(4, k=()).accuracy >= 0.0
    with pytest.raises(ConfigError, match=r"does not exist\. \(The run was loaded without it"):
        loaded.learn(2)


def test_an_error_mid_run_starts_on_its_own_line_below_the_progress_bar(monkeypatch, capsys):
    # the bar's \r line was left open, and the CLI's "error: ..." landed at its end
    class Breaks(gym.Wrapper):
        steps = 0

        def step(self, action):
            Breaks.steps += 1
            if Breaks.steps > 300:
                raise RuntimeError("the simulator crashed")
            return self.env.step(action)

    monkeypatch.setenv("PAYOFF_PROGRESS", "1")
    agent = payoff.PPO(env=lambda: Breaks(gym.make("CartPole-v1")), num_envs=1, num_steps=64)
    capsys.readouterr()
    try:
        agent.learn(10_000)
    except EnvError as error:  # what the CLI prints, while the error (and the bar) lives
        err = capsys.readouterr().err
        assert "the simulator crashed" in str(error)
    assert "%|" in err and err.endswith("\n")


def test_sb3_and_trl_key_names_point_to_payoffs():
    # SAC(env, buffer_size=...) answered "Did you mean 'batch_size'?": a batch of a million
    from payoff.algos.grpo import GRPOConfig
    from payoff.core.config import from_dict

    with pytest.raises(
        ConfigError, match="'buffer_size'. That is SB3's name; payoff's is 'replay.size'"
    ):
        payoff.SAC("Pendulum-v1", buffer_size=1000)
    with pytest.raises(ConfigError, match="payoff's is 'alpha' \\(and 'autotune'"):
        payoff.SAC("Pendulum-v1", ent_coef=0.1)
    with pytest.raises(ConfigError, match="That is TRL's name; payoff's is 'group_size'"):
        from_dict(GRPOConfig, {"num_generations": 8})
    # SB3's schedule, a function of progress_remaining: the data that replaces it
    with pytest.raises(ConfigError, match=r"'learning_rate' takes a number or a schedule, not a"):
        payoff.PPO("CartPole-v1", learning_rate=lambda remaining: 3e-4 * remaining)
    decaying = payoff.PPO("CartPole-v1", learning_rate={"start": 3e-4, "end": 0.0})
    assert decaying.config.learning_rate(1.0) == 0.0
    # names a user of the docs tried next (2026-11-28), which got no answer or a wrong one
    from payoff.algos.dpo import DPOConfig
    from payoff.algos.dqn import DQNConfig

    said = {
        (GRPOConfig, "reward_funcs"): "payoff's is 'rewards'",
        (GRPOConfig, "train_dataset"): "payoff's is 'task'",
        (DPOConfig, "train_dataset"): "payoff's is 'preferences'",
        (DPOConfig, "loss_type"): "payoff's is 'loss'",
        (DQNConfig, "exploration_fraction"): "payoff's is 'epsilon.fraction'",
        (DQNConfig, "exploration_final_eps"): "payoff's is 'epsilon.end'",
        (DQNConfig, "target_update_interval"): "from Python) (counted in gradient steps",
        (DQNConfig, "activation_fn"): "payoff's is 'activation'",
        (DQNConfig, "tensorboard_log"): "--track tensorboard (or PAYOFF_LOGGERS=tensorboard)",
        (DQNConfig, "buffer_size"): "payoff's is 'replay.size' (replay={'size': ...} from Python)",
        (DQNConfig, "train_freq"): "set gradient_steps too for SB3's ratio",
        (DQNConfig, "tau"): "payoff's is 'target_network.tau'",
        (DQNConfig, "env_kwargs"): "payoff's is 'env.kwargs'",
        (DQNConfig, "policy"): "there is no policy name to pass",
        (DQNConfig, "use_sde"): "no state-dependent exploration",
        (DQNConfig, "verbose"): "PAYOFF_PROGRESS=0",
        (GRPOConfig, "gradient_accumulation_steps"): "payoff's is 'microbatch_size'",
        (DPOConfig, "gradient_accumulation_steps"): "payoff has no gradient accumulation",
        (GRPOConfig, "peft_config"): "payoff's is 'model.lora_rank'",
        (GRPOConfig, "num_iterations"): "payoff's is 'updates_per_batch'",
        (DPOConfig, "max_prompt_length"): "payoff does not cut prompts",
    }
    for (config, key), answer in said.items():
        with pytest.raises(ConfigError) as info:
            from_dict(config, {key: 1})
        assert answer in str(info.value), (key, str(info.value))


def test_a_task_or_preferences_given_as_a_path_string_is_read_as_your_file():
    # GRPO(task="rows.jsonl") and DPO(preferences="pairs.jsonl") were refused: "must be a mapping"
    from payoff.algos.dpo import DPOConfig
    from payoff.algos.grpo import GRPOConfig
    from payoff.core.config import from_dict

    task = from_dict(GRPOConfig, {"task": "data/rows.jsonl"}).task
    assert (task.name, task.data) == ("jsonl", "data/rows.jsonl")
    assert from_dict(GRPOConfig, {"task": "addition"}).task.name == "addition"  # a built-in's name
    assert from_dict(DPOConfig, {"preferences": "pairs.jsonl"}).preferences.path == "pairs.jsonl"
    with pytest.raises(ConfigError, match="unknown task 'additon'. Did you mean 'addition'"):
        from_dict(GRPOConfig, {"task": "additon"}).task.validate()  # not 'file does not exist'


def test_generation_stops_on_every_eos_the_models_generation_config_lists(tmp_path):
    # chat models list several (Qwen: <|im_end|> and <|endoftext|>); only the tokenizer's
    # eos stopped a completion, so they ran on to max_new_tokens past the end of the turn
    from payoff.models.lm import ModelConfig, load_lm
    from payoff.rollout.generation import LocalSampler, SamplingConfig

    torch.manual_seed(0)  # the random GPT-2's weights: its greedy tokens are fixed
    _gpt2(tmp_path / "gpt2")
    model, tokenizer = load_lm(ModelConfig(path=str(tmp_path / "gpt2")))
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=6)
    before = LocalSampler(model, tokenizer).generate(["1+1="], greedy)
    first = int(before.completion_ids[0, 0])
    assert first != tokenizer.eos_token_id and int(before.completion_mask[0].sum()) > 1
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, first]
    after = LocalSampler(model, tokenizer).generate(["1+1="], greedy)
    assert int(after.completion_mask[0].sum()) == 1 and not bool(after.truncated[0])


def test_paths_in_a_recipe_file_are_also_found_beside_the_recipe(tmp_path, monkeypatch):
    # run from the project root, exp/mine.yaml's data/rows.jsonl was 'does not exist'
    (tmp_path / "exp" / "data").mkdir(parents=True)
    (tmp_path / "exp" / "data" / "rows.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    (tmp_path / "exp" / "mine.py").write_text(
        "def one(prompts, completions, **kw):\n    return [1.0] * len(completions)\n"
    )
    recipe = tmp_path / "exp" / "mine.yaml"
    recipe.write_text(
        "algo: grpo\ntask: {name: jsonl, data: data/rows.jsonl}\nrewards: [{name: mine.py:one}]\n"
    )
    monkeypatch.chdir(tmp_path)
    _, config, _ = resolve(str(recipe.relative_to(tmp_path)), [])
    assert config.task.data == str(tmp_path / "exp" / "data" / "rows.jsonl")
    assert config.rewards[0].name == f"{tmp_path / 'exp' / 'mine.py'}:one"
    short = tmp_path / "exp" / "short.yaml"  # task: FILE, as Python's task="rows.jsonl"
    short.write_text("algo: grpo\ntask: data/rows.jsonl\n")
    _, config, _ = resolve(str(short.relative_to(tmp_path)), [])
    assert config.task.data == str(tmp_path / "exp" / "data" / "rows.jsonl")


def test_plot_calls_runs_of_one_seed_runs_not_seeds(tmp_path, monkeypatch):
    # two runs of the same recipe and seed were drawn as "(mean of 2 seeds)"
    import matplotlib.axes

    from payoff.report.plots import plot_curves
    from payoff.track.run import Run

    labels: list[str] = []
    plot = matplotlib.axes.Axes.plot

    def recording(self, *args, **kwargs):
        labels.append(str(kwargs.get("label")))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", recording)

    def runs(seeds):
        made = []
        for i, seed in enumerate(seeds):
            run = Run.create(tmp_path, f"s{seed}-{i}", {"recipe": "cartpole-ppo", "seed": seed})
            for step in (100, 200):
                run.log(step, **{"eval/mean_return": float(step + i)})
            run.close()
            made.append(run)
        return made

    plot_curves(runs([0, 0]), tmp_path / "same.png")
    plot_curves(runs([1, 2]), tmp_path / "two.png")
    assert any("(mean of 2 runs)" in label for label in labels)
    assert any("(mean of 2 seeds)" in label for label in labels)


def test_an_lm_predicts_from_a_conversation_as_from_a_prompt(tmp_path):
    # predict([{"role": "user", ...}]) treated each message as a prompt and failed
    from payoff.algos.grpo import GRPO

    torch.manual_seed(0)
    _gpt2(tmp_path / "gpt2")
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(20)]
    grpo = GRPO(model={"path": str(tmp_path / "gpt2")}, task=rows, steps=1, max_new_tokens=3)
    chat = [{"role": "user", "content": "2+2?"}]
    one = grpo.predict(chat)
    assert isinstance(one, str) and one == grpo.predict("user: 2+2?\nassistant: ")  # no template
    assert grpo.predict([chat, chat]) == [one, one]
    with pytest.raises(ConfigError, match="predict takes a non-empty prompt string, a conv"):
        grpo.predict([3])
    for bad in ("", 5, None):  # torch's reshape error, a TypeError, ...
        with pytest.raises(ConfigError, match=f"predict takes .* got {bad!r}"):
            grpo.predict(bad)


def ends_in_a_digit(completions, **_):
    return [float(c[-1:].isdigit()) for c in completions]


def test_python_rewards_take_settings_a_single_function_and_no_reserved_column(tmp_path):
    # {"function": f, "weight": ...} was refused as 'set from Python only' (from Python);
    # a column named 'completions' crashed the first reward call with a raw TypeError
    from payoff.algos.grpo import GRPO

    _gpt2(tmp_path / "gpt2")
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(20)]
    model = {"path": str(tmp_path / "gpt2")}
    kinds = (
        ends_in_a_digit,  # TRL's reward_funcs=f
        [{"function": ends_in_a_digit, "weight": 0.5, "timeout": 2}],
        [{"name": ends_in_a_digit, "label": "digit"}],
    )
    specs = [GRPO(model=model, task=rows, rewards=r, steps=1).config.rewards for r in kinds]
    assert [len(s) for s in specs] == [1, 1, 1]
    assert all(s[0].function is ends_in_a_digit for s in specs)
    assert (specs[1][0].weight, specs[1][0].timeout, specs[2][0].key) == (0.5, 2.0, "digit")
    assert specs[0][0].name.endswith(":ends_in_a_digit")
    with pytest.raises(ConfigError, match=r"'rewards\[0\].function' must be a callable"):
        GRPO(model=model, task=rows, rewards=[{"function": "os:system"}], steps=1)
    for column in ("completions", "completion_ids", "prompts", "self"):
        taken = [dict(row, **{column: "x"}) for row in rows]
        with pytest.raises(DataError, match=f"rows\\[0\\]: column '{column}' has a name"):
            GRPO(model=model, task=taken, rewards=[ends_in_a_digit], steps=1)


def test_sft_on_rows_too_few_to_hold_any_out_trains_and_saves(tmp_path, capsys):
    # it trained every step, then stopped on the empty test split, saving no model
    from payoff.algos.sft import SFT
    from payoff.track.run import Run

    _gpt2(tmp_path / "gpt2")
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(3)]
    run = Run.create(tmp_path / "runs", "sft", {"algo": "sft"})
    sft = SFT(model={"path": str(tmp_path / "gpt2")}, task=rows, steps=2, run=run)
    assert "no held-out rows in task" in capsys.readouterr().err  # said before training
    sft.learn()
    assert (run.path / "model" / "config.json").is_file()
    assert "no held-out accuracy" in run.summary()["final_line"]
    with pytest.raises(ConfigError, match=r"held out by a hash of each row's 'key' column"):
        sft.evaluate(4, split="test")


def test_disable_dropout_reaches_rates_kept_as_numbers():
    # OPT's layers call F.dropout(p=self.dropout) with a float, no nn.Dropout to find
    from transformers import OPTConfig, OPTForCausalLM

    from payoff.models.lm import disable_dropout

    model = OPTForCausalLM(
        OPTConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=1,
            ffn_dim=32,
            num_attention_heads=2,
            word_embed_proj_dim=16,
            max_position_embeddings=32,
        )
    )

    def rates():
        return {
            v
            for m in model.modules()
            for n, v in vars(m).items()
            if "dropout" in n and isinstance(v, float)
        }

    assert 0.1 in rates()
    disable_dropout(model)
    assert rates() == {0.0}


def test_an_info_that_is_not_a_dict_is_named_as_such():
    # it got the old-Gym hint about 4-value steps, which did not apply
    class InfoNone(gym.Wrapper):
        def step(self, action):
            obs, reward, terminated, truncated, _ = self.env.step(action)
            return obs, reward, terminated, truncated, None

    agent = payoff.PPO(
        lambda: InfoNone(gym.make("CartPole-v1")), num_envs=2, num_steps=8, minibatch_size=8
    )
    with pytest.raises(EnvError, match="return info as a dict") as caught:
        agent.learn(16)
    assert "4 values" not in str(caught.value)


def test_an_env_refusing_its_kwargs_is_one_clear_error():
    # CleaningRobot(messes=40) ended in numpy's "Cannot take a larger sample than population"
    from payoff.envs.make import EnvConfig, make_env

    with pytest.raises(
        EnvError, match=r"rejected its arguments \{'messes': 40\}: messes must be 1..23"
    ):
        make_env(EnvConfig(id="payoff/CleaningRobot-v0", kwargs={"messes": 40}))


def test_a_monitors_override_is_recorded_among_the_runs_overrides():
    # the report's "Overrides" line left out monitors=[...] given on the command line
    monitor = "monitors=[{kind: threshold, key: train/kl, above: 0.5}]"
    _, _, resolved = resolve("cartpole-ppo", ["total_steps=100", monitor], seed=3)
    assert resolved["overrides"] == ["total_steps=100", monitor, "seed=3"]


class _NumberedFrom100(gym.Env):
    """A corridor whose states are Discrete(5, start=100)."""

    observation_space = gym.spaces.Discrete(5, start=100)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.state = 100
        return self.state, {}

    def step(self, action):
        self.state = min(104, max(100, self.state + (1 if action else -1)))
        return self.state, float(self.state == 104), self.state == 104, False, {}


def test_discrete_observations_numbered_from_an_offset():
    """Discrete(5, start=100) states crashed every network algorithm (one-hot of 100) and
    Q-learning (row 101 of 5); a state outside the space is named."""
    agent = payoff.PPO(_NumberedFrom100, num_envs=2, num_steps=32, eval_every=0).learn(128)
    action, _ = agent.predict(102)
    assert action in (0, 1)
    with pytest.raises(EnvError, match=r"state 107 is outside .*100\.\.104"):
        agent.predict(107)
    with pytest.raises(EnvError, match="Q-learning numbers states and actions from 0"):
        payoff.QLearning(_NumberedFrom100)


class _ActionsFrom1(gym.Env):
    """Actions Discrete(3, start=1); any other action is the env's error."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3, start=1)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if int(action) not in (1, 2, 3):
            raise ValueError(f"got action {action}, valid 1..3")
        self.t += 1
        return np.zeros(2, np.float32), float(action == 3), False, self.t >= 10, {}


def test_actions_numbered_from_an_offset_reach_the_env_as_such():
    """ES sent Discrete(3, start=1) envs action 0 (an env that does not check would have
    taken it); mbrl now refuses the offset as DQN does."""
    from payoff.algos.es import ES
    from payoff.algos.mbrl import MBRL

    es = ES(_ActionsFrom1, pairs=2, total_steps=200, eval_every=0, final_eval_episodes=1).learn()
    action, _ = es.predict(np.zeros(2, np.float32))
    assert action in (1, 2, 3)
    with pytest.raises(EnvError, match=r"mbrl plans with action indices 0\.\.n-1"):
        MBRL(_ActionsFrom1)


class _NeverEnds(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}


def test_imitation_evaluations_cut_endless_episodes_with_the_shared_warning():
    """BC and DAgger's evaluation cut them at 10,000 steps without a word; every other
    whole-episode loop cuts at 100,000 and says so."""
    from payoff.envs.make import EnvConfig
    from payoff.rollout.evaluate import EPISODE_STEP_LIMIT
    from payoff.rollout.imitation import play_episodes

    env = EnvConfig(factory=_NeverEnds)
    assert play_episodes.__defaults__ == (EPISODE_STEP_LIMIT,)
    with pytest.warns(RuntimeWarning, match="had not ended after 50 steps"):
        traces = play_episodes(env, lambda obs: np.zeros(len(obs), int), 2, seed=0, max_steps=50)
    assert list(traces.lengths) == [50, 50]


class _OldGymStep(_NeverEnds):
    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, {}  # Gym's 4 values


class _NaNReward(_NeverEnds):
    def step(self, action):
        return np.zeros(2, np.float32), float("nan"), False, False, {}


@pytest.mark.parametrize("env, said", [(_OldGymStep, "old Gym"), (_NaNReward, "non-finite")])
@pytest.mark.parametrize("algo", ["ES", "BC", "DAgger"])
def test_evolution_strategies_and_imitation_check_what_the_env_returns(env, said, algo):
    """ES, BC and DAgger step envs in their own loops: a 4-value step was a bare
    ValueError there, and NaN rewards trained and evaluated as nan without a word."""
    expert = {"expert": lambda obs: np.zeros(len(obs), int), "label_budget": 20}
    options = {
        "ES": {"pairs": 1, "total_steps": 100},
        "BC": {**expert, "epochs": 1},
        "DAgger": {**expert, "rounds": 1},
    }[algo]
    agent = getattr(payoff, algo)(env, eval_every=0, final_eval_episodes=1, **options)
    with pytest.raises(EnvError, match=said):
        agent.learn()


class _SquareActions(_NeverEnds):
    action_space = gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32)

    def step(self, action):
        assert np.shape(action) == (2, 2)
        self.t = getattr(self, "t", 0) + 1
        return np.zeros(2, np.float32), -float(np.abs(action).sum()), False, self.t % 10 == 0, {}


@pytest.mark.parametrize("algo, loss", [("BC", "mse"), ("BC", "nll"), ("DAgger", "mse")])
def test_imitation_of_box_actions_of_any_shape(algo, loss):
    """A (2, 2) Box action: 'The size of tensor a (4) must match the size of tensor b (2)'."""
    expert = lambda obs: np.full((len(obs), 2, 2), 0.5, np.float32)  # noqa: E731
    options = {"rounds": 1} if algo == "DAgger" else {"epochs": 2}
    agent = getattr(payoff, algo)(
        _SquareActions,
        expert=expert,
        label_budget=40,
        loss=loss,
        eval_every=0,
        final_eval_episodes=1,
        **options,
    ).learn()
    action, _ = agent.predict(np.zeros(2, np.float32))
    assert np.shape(action) == (2, 2)


class _TorqueFrom10(_NeverEnds):
    action_space = gym.spaces.Box(10.0, 20.0, (1,), np.float32)

    def step(self, action):
        self.t = getattr(self, "t", 0) + 1
        return np.zeros(2, np.float32), -abs(float(action[0]) - 15.0), False, self.t % 20 == 0, {}


def test_a_gaussian_policy_on_a_box_that_leaves_out_zero_is_warned_about():
    """Box(10, 20): every action PPO took at the start was exactly 10.0 (clipped), silently."""
    with pytest.warns(RuntimeWarning, match=r"leaves out 0.*RescaleAction"):
        payoff.PPO(_TorqueFrom10, num_envs=2, num_steps=32, eval_every=0)
    # 0 at a bound: half the first actions of dimension 1 were clipped to 0, silently
    with pytest.warns(
        RuntimeWarning, match=r"puts 0 at or near a bound \(dimension 1: \[0, 10\]\)"
    ):
        payoff.PPO(_AsymmetricBox, num_envs=2, num_steps=32, eval_every=0)
    with warnings.catch_warnings():  # [-1, 1], as recommended: no warning
        warnings.simplefilter("error")
        payoff.PPO(_UnitBox, num_envs=2, num_steps=32, eval_every=0)


class _AsymmetricBox(_TorqueFrom10):
    action_space = gym.spaces.Box(np.array([-1.0, 0.0]), np.array([3.0, 10.0]), dtype=np.float32)


class _UnitBox(_TorqueFrom10):
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class _HoldsALock(_NeverEnds):
    def __init__(self):
        import threading

        self.lock = threading.Lock()


def test_an_env_instance_that_cannot_pickle_is_refused_for_async_before_the_workers_start():
    """The EnvError was raised inside a worker process; the user got ConnectionResetError."""
    with pytest.raises(EnvError, match=r"vectorization 'async' .* must pickle.*'sync'"):
        payoff.PPO(_HoldsALock(), num_envs=2, num_steps=32, vectorization="async", eval_every=0)
    # on Ray it was Ray's serialization dump (checked before Ray starts: no cluster needed)
    pytest.importorskip("ray")
    with pytest.raises(EnvError, match=r"backend 'ray' .* must pickle.*backend 'local'"):
        payoff.ES(_HoldsALock(), pairs=2, backend="ray", eval_every=0)


def test_a_wrapped_instance_is_named_by_the_env_inside():
    """PPO(TimeLimit(MyEnv(), 50)) was labelled 'gymnasium.wrappers.common:TimeLimit'."""
    from payoff.envs.make import env_config_of

    config = env_config_of(gym.wrappers.TimeLimit(_NeverEnds(), max_episode_steps=5))
    assert config.id.endswith(":_NeverEnds")
    agent = payoff.PPO(gym.wrappers.TimeLimit(_NeverEnds(), max_episode_steps=5), eval_every=0)
    assert agent.evaluate(2).mean_length == 5  # the time limit holds for the copies too


def test_preference_pairs_given_as_the_task_are_pointed_to_preferences():
    from payoff.algos.dpo import DPO

    pairs = [{"prompt": f"q{i}", "chosen": "yes", "rejected": "no"} for i in range(40)]
    with pytest.raises(ConfigError, match="preference pairs go in preferences="):
        DPO(task=pairs)


class _Huge(gym.Env):
    """Pays 1e30 a step: the value loss overflows."""

    observation_space = gym.spaces.Box(-1, 1, (3,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(3, np.float32), 1e30, False, self.t >= 20, {}

    def render(self):
        return np.full((8, 8, 3), 0.7, np.float32)  # colours in [0, 1]: a black GIF


def test_a_diverged_loss_a_nan_checkpoint_and_float_frames_are_refused(tmp_path):
    # PPO trained on with train/value_loss inf; a checkpoint of NaN weights loaded and acted
    # (argmax of NaN: always 0); float frames made an all-black GIF
    from payoff import PPO
    from payoff.core.errors import CheckpointError, TrainingError

    settings = {"num_envs": 2, "num_steps": 32, "minibatch_size": 32}
    with pytest.raises(TrainingError, match=r"train/value_loss is inf at step \d+: the update"):
        PPO(_Huge(), **settings).learn(640)
    agent = PPO("CartPole-v1", **settings).learn(64)
    with torch.no_grad():
        next(agent.actor.parameters()).fill_(float("nan"))
    agent.save(tmp_path / "nan.pt")
    with pytest.raises(CheckpointError, match=r"actor\.logits\.0\.weight holds NaN or inf"):
        PPO.load(tmp_path / "nan.pt")
    with pytest.raises(EnvError, match=r"renders float32 frames; a GIF needs uint8"):
        PPO(lambda render_mode=None: _Huge(render_mode), **settings).record_gif(tmp_path / "x.gif")


def test_q_learning_refuses_a_state_that_is_not_one_int():
    from payoff import QLearning

    class Grid(gym.Env):
        observation_space, action_space = gym.spaces.Discrete(5), gym.spaces.Discrete(2)

        def __init__(self, obs):
            self.obs = obs

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            return self.obs, {}

        def step(self, action):
            return self.obs, 0.0, True, False, {}

    for obs in (2.0, np.array([2])):  # a raw IndexError; a silent (1,) table row
        with pytest.raises(EnvError, match=r"needs one int in \[0, 5\)"):
            QLearning(Grid(obs), total_episodes=2).learn()
    assert QLearning(Grid(np.int64(2)), total_episodes=2).learn().episode == 2


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_weights_that_do_not_fit_their_config_are_refused_not_initialized_at_random(tmp_path):
    """transformers fills weights a folder lacks with random ones and, at payoff's log level,
    says nothing: a run would train from noise. Each mismatch is refused by name."""
    import shutil

    from safetensors.torch import load_file, save_file

    from payoff.models.lm import ModelConfig, load_lm

    _gpt2(tmp_path / "ok")
    model, _ = load_lm(ModelConfig(path=str(tmp_path / "ok")))
    assert type(model).__name__ == "GPT2LMHeadModel"
    # config.json naming another architecture than the weights
    shutil.copytree(tmp_path / "ok", tmp_path / "llama-config")
    from transformers import LlamaConfig

    LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        vocab_size=97,
    ).save_pretrained(tmp_path / "llama-config")
    with pytest.raises(ConfigError, match=r"weight\(s\) it needs are not in the files .*random"):
        load_lm(ModelConfig(path=str(tmp_path / "llama-config")))
    # a PEFT-wrapped model's state dict, saved as the weights
    shutil.copytree(tmp_path / "ok", tmp_path / "prefixed")
    weights = tmp_path / "prefixed" / "model.safetensors"
    state = load_file(weights)
    save_file({f"base_model.model.{k}": v for k, v in state.items()}, weights)
    with pytest.raises(ConfigError, match="PEFT-wrapped model's weights .*merge_and_unload"):
        load_lm(ModelConfig(path=str(tmp_path / "prefixed")))
    # a vocabulary size that is not the weights'
    shutil.copytree(tmp_path / "ok", tmp_path / "vocab")
    _edit_json(tmp_path / "vocab" / "config.json", vocab_size=120)
    with pytest.raises(
        ConfigError,
        match=r"other shapes \(transformer.wte.weight: \(97, 16\) in the files, \(120, 16\)",
    ):
        load_lm(ModelConfig(path=str(tmp_path / "vocab")))
    # config.json that is not JSON is named, not blamed on the tokenizer
    shutil.copytree(tmp_path / "ok", tmp_path / "torn")
    (tmp_path / "torn" / "config.json").write_text('{"model_type": "gpt2",')
    with pytest.raises(ConfigError, match="config.json of model folder .* is not valid JSON"):
        load_lm(ModelConfig(path=str(tmp_path / "torn")))


def test_a_chat_template_that_fails_and_lora_on_a_non_linear_module_are_one_line_errors(tmp_path):
    from payoff.models.chat import uses_chat_template
    from payoff.models.lm import ModelConfig, load_lm

    _gpt2(tmp_path / "m")
    _edit_json(tmp_path / "m" / "tokenizer_config.json", chat_template="{{ m.role }")
    tokenizer = load_tokenizer(tmp_path / "m")
    with pytest.raises(ConfigError, match="chat template failed .*TemplateSyntaxError.*=none"):
        uses_chat_template(tokenizer, "auto")
    assert uses_chat_template(tokenizer, "none") is False
    with pytest.raises(ConfigError, match=r"lora_targets \['ln_f'\]: .*not supported.*c_attn"):
        load_lm(ModelConfig(path=str(tmp_path / "m"), lora_rank=4, lora_targets=["ln_f"]))
    with pytest.raises(ConfigError, match="lora_rank is 0, so LoRA is off"):
        ModelConfig(lora_targets=["c_attn"]).validate()


def test_a_reward_file_that_does_not_import_is_named_in_one_line(tmp_path):
    (tmp_path / "syntax.py").write_text("def f(:\n    pass\n")
    (tmp_path / "raises.py").write_text("x = 1 / 0\ndef f(completions, **_):\n    return []\n")
    with pytest.raises(ConfigError, match="syntax error at line 1"):
        RewardMix([RewardSpec(f"{tmp_path / 'syntax.py'}:f")])
    with pytest.raises(ConfigError, match="raised ZeroDivisionError when imported"):
        RewardMix([RewardSpec(f"{tmp_path / 'raises.py'}:f")])


def test_sft_rows_past_the_context_and_empty_answers_are_refused_before_training(tmp_path):
    long = tmp_path / "long.jsonl"
    long.write_text("\n".join(json.dumps({"text": "ab" * 40 + str(i)}) for i in range(30)))
    _gpt2(tmp_path / "m", positions=32)
    with pytest.raises(
        ConfigError, match=r"training row .* is \d+ tokens \(prompt, answer and EOS\), past the 32"
    ):
        SFT(task={"name": "jsonl", "data": str(long)}, model={"path": str(tmp_path / "m")}, steps=1)
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2=", "answer": " "}\n')
    with pytest.raises(DataError, match=r"empty.jsonl:2: 'answer' is ' ', an empty answer"):
        SFT(task={"name": "jsonl", "data": str(empty)}, steps=1)


def test_a_vector_env_inside_transforming_vector_wrappers_is_refused():
    """Evaluation, GIFs and saved agents make single envs from the id inside: a vector
    wrapper's transform would be missing there (the agent scored 9 on a task it solved)."""
    vec = gym.make_vec("CartPole-v1", num_envs=2)
    with pytest.raises(EnvError, match="wrapped by TransformObservation .* Wrap each env"):
        payoff.PPO(gym.wrappers.vector.TransformObservation(vec, lambda o: -o))
    # a wrapper that changes nothing the agent sees is fine
    payoff.PPO(gym.wrappers.vector.RecordEpisodeStatistics(gym.make_vec("CartPole-v1", 2)))


def test_env_none_an_env_without_spaces_and_bad_env_arguments_are_named():
    with pytest.raises(ConfigError, match=r"PPO\(env=None\): no env was given .* CartPole-v1"):
        payoff.PPO(None)

    class NoSpaces(gym.Env):
        def reset(self, *, seed=None, options=None):
            return np.zeros(4, np.float32), {}

        def step(self, action):
            return np.zeros(4, np.float32), 0.0, True, False, {}

    with pytest.raises(EnvError, match="has no observation_space .* self.action_space"):
        payoff.PPO(NoSpaces())
    with pytest.raises(EnvError, match=r"rejected its arguments \{'map_name': '9x9'\}: KeyError"):
        payoff.QLearning(env={"id": "FrozenLake-v1", "kwargs": {"map_name": "9x9"}})
    bad_limit = {"name": "TimeLimit", "kwargs": {"max_episode_steps": "abc"}}
    # (gymnasium's own check of the value is an AssertionError or a TypeError by version)
    with pytest.raises(EnvError, match="wrapper 'TimeLimit' rejected .*(Assertion|Type)Error"):
        payoff.PPO(env={"id": "CartPole-v1", "wrappers": [bad_limit]})


def test_predict_refuses_nan_observations():
    agent = payoff.PPO("CartPole-v1")
    with pytest.raises(EnvError, match=r"holds NaN \(element 2\)"):
        agent.predict(np.array([0.0, 0.0, np.nan, 0.0]))
    action, _ = agent.predict(np.zeros(4))
    assert action in (0, 1)


def test_a_recipe_with_a_key_given_twice_is_refused(tmp_path, capsys):
    from payoff.cli import main

    recipe = tmp_path / "mine.yaml"
    recipe.write_text("algo: ppo\nenv: {id: CartPole-v1}\ntotal_steps: 2000\ntotal_steps: 3000\n")
    assert main(["train", str(recipe), "--out", str(tmp_path / "runs")]) == 2
    assert "key 'total_steps' is given twice (lines 3 and 4)" in capsys.readouterr().err


def test_a_box_of_integer_actions_is_refused_for_continuous_policies():
    class IntegerActions(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (3,))
        action_space = gym.spaces.Box(0, 5, (2,), np.int64)

        def reset(self, *, seed=None, options=None):
            return np.zeros(3, np.float32), {}

        def step(self, action):
            return np.zeros(3, np.float32), 0.0, True, False, {}

    for algorithm in (payoff.PPO, payoff.SAC):
        with pytest.raises(EnvError, match="real-valued actions.*int64 values.*MultiDiscrete"):
            algorithm(IntegerActions())


def test_a_recipe_may_name_its_env_by_id_and_its_algorithm_as_the_class_is_spelt(tmp_path):
    from payoff.cli import main

    recipe = tmp_path / "mine.yaml"
    recipe.write_text(
        "algo: PPO\nenv: CartPole-v1\ntotal_steps: 256\nnum_envs: 4\nnum_steps: 64\n"
        "minibatch_size: 64\neval_every: 0\nfinal_eval_episodes: 1\n"
    )
    assert main(["train", str(recipe), "--out", str(tmp_path / "runs"), "--no-media"]) == 0


def test_a_pandas_dataframe_is_rows_for_task_and_preferences():
    pd = pytest.importorskip("pandas")
    from payoff.envs.tasks import make_task
    from payoff.envs.tasks.preferences import PreferenceDataConfig

    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(10)]
    task = make_task(TaskConfig.from_value(pd.DataFrame(rows)))
    assert len(task.train_rows) + len(task.test_rows) == 100
    pairs = PreferenceDataConfig.from_value(
        pd.DataFrame([{"prompt": "a", "chosen": "b", "rejected": "c"}])
    )
    assert pairs.dataset == [{"prompt": "a", "chosen": "b", "rejected": "c"}]


def test_loading_a_checkpoint_whose_data_file_changed_says_so(tmp_path):
    data = tmp_path / "rows.jsonl"
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(8) for b in range(8)]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    sft = SFT(task={"name": "jsonl", "data": str(data)}, steps=1, batch_size=4, eval_every=0)
    path = sft.save(tmp_path / "sft.safetensors")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same rows: not a word
        SFT.load(path)
    data.write_text("\n".join(json.dumps(r) for r in rows[:40]))
    with pytest.warns(RuntimeWarning, match="are not the ones this checkpoint trained on"):
        SFT.load(path)


class _CostInStepOnly(_Blank):
    """20-step episodes whose step infos carry a cost and whose reset info does not."""

    def step(self, action):
        self.t += 1
        return np.zeros(3, np.float32), 0.0, False, self.t >= 20, {"cost": float(action)}


def test_an_info_key_only_steps_carry_is_not_missing_on_the_step_that_only_resets():
    # with one env (or all ending together) the next step only resets: its infos are reset()'s
    agent = payoff.PPOLagrangian(
        _CostInStepOnly(),
        num_envs=1,
        total_steps=128,
        **{k: v for k, v in TINY.items() if k != "num_envs"},
    )
    agent.learn()
    assert agent.step >= 128
    with pytest.raises(EnvError, match="puts no 'costs' in info"):  # a key steps lack: named
        payoff.PPOLagrangian(_CostInStepOnly(), cost_key="costs", **TINY).learn(64)


def test_a_second_learn_without_a_number_says_it_trains_no_further():
    agent = payoff.PPO("CartPole-v1", total_steps=64, **TINY).learn()
    reached = agent.step  # >= 64 (whole rollouts)
    with pytest.warns(RuntimeWarning, match=r"has reached \(step \d+\).*learn\(n\) trains n more"):
        agent.learn()
    assert agent.step == reached
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert agent.learn(64).step >= reached + 64  # a number: n more, without a word


class _PixelsAndTorque(_TorqueFrom10):
    observation_space = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        return np.zeros((8, 8, 3), np.uint8), {}


def test_mbpo_refuses_images_as_mbrl_does():
    """It trained a dynamics model on 3,072 pixel values per step (97 s for 300 steps)."""
    with pytest.raises(EnvError, match=r"mbpo's dynamics model .* images are out of its reach"):
        payoff.MBPO(_PixelsAndTorque)


class _RewardInAnArray(_Blank):
    def step(self, action):
        self.t += 1
        return np.zeros(3, np.float32), np.array([1.0], np.float32), False, self.t >= 5, {}


@pytest.mark.parametrize("name", ["ES", "BC"])
def test_a_reward_in_an_array_is_named_as_the_reward_under_es_and_bc(name):
    options = {"pairs": 2} if name == "ES" else {"expert": lambda obs: np.zeros(len(obs), int)}
    with pytest.raises(EnvError, match=r"step must return the reward as a float, not an array"):
        getattr(payoff, name)(_RewardInAnArray, **options).learn(20 if name == "ES" else None)


def test_an_env_instance_is_saved_with_its_make_arguments_and_a_wrapped_one_is_asked_for(tmp_path):
    """A saved agent rebuilt a FrozenLake 8x8 instance as the 4x4 default, and an instance in
    TransformObservation as the bare env, scoring the agent on observations it never saw."""
    made = gym.make("FrozenLake-v1", map_name="8x8", max_episode_steps=50)
    agent = payoff.QLearning(made, total_episodes=5).learn()
    agent.save(tmp_path / "q.safetensors")
    loaded = payoff.QLearning.load(tmp_path / "q.safetensors")
    assert loaded.config.env.kwargs == {"map_name": "8x8"}
    assert loaded.config.env.max_episode_steps == 50
    assert loaded.evaluate(2).episodes == 2
    space = gym.make("CartPole-v1").observation_space
    hidden = gym.wrappers.TransformObservation(gym.make("CartPole-v1"), lambda o: o * 0, space)
    agent = payoff.PPO(hidden, total_steps=64, **TINY).learn()
    agent.save(tmp_path / "ppo.safetensors")
    with pytest.raises(EnvError, match="pass it again: Algo.load\\(path, env=...\\)"):
        payoff.PPO.load(tmp_path / "ppo.safetensors")
    again = payoff.PPO.load(tmp_path / "ppo.safetensors", env=hidden)
    assert again.evaluate(1).episodes == 1


def test_max_episode_steps_past_the_registered_limit_lengthens_episodes(tmp_path):
    """env.max_episode_steps=500 on Pendulum (registered at 200) still cut episodes at 200:
    a TimeLimit around gymnasium.make's own could only shorten them."""
    agent = payoff.PPO({"id": "Pendulum-v1", "max_episode_steps": 500}, total_steps=64, **TINY)
    assert agent.evaluate(1).episode_lengths == [500]
    live = payoff.PPO(gym.make("Pendulum-v1", max_episode_steps=300), total_steps=64, **TINY)
    live.save(tmp_path / "p.safetensors")
    assert payoff.PPO.load(tmp_path / "p.safetensors").evaluate(1).episode_lengths == [300]
    short = payoff.PPO({"id": "Pendulum-v1", "max_episode_steps": 20}, total_steps=64, **TINY)
    assert short.evaluate(1).episode_lengths == [20]


def test_a_model_saved_without_its_head_is_named_so(tmp_path):
    """The message blamed config.json for coming from another model; it came from AutoModel."""
    from transformers import LlamaConfig, LlamaModel

    from payoff.models.lm import ModelConfig, load_lm

    _, tokenizer = load_lm(ModelConfig(), seed=0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        tie_word_embeddings=False,  # the head is weights of its own, which AutoModel drops
    )
    LlamaModel(config).save_pretrained(tmp_path / "base-only")
    tokenizer.save_pretrained(tmp_path / "base-only")
    with pytest.raises(ConfigError, match=r"architectures are \['LlamaModel'\]: .* without its"):
        load_lm(ModelConfig(path=str(tmp_path / "base-only")))


def test_a_tokenizer_that_starts_every_text_with_bos_gets_it_once_at_each_start(tmp_path):
    """payoff tokenized without special tokens, so a Llama/Mistral/Gemma-style tokenizer's BOS
    was never seen in training: the saved model scored 0.72 against 0.86 when called as
    transformers calls it (with BOS)."""
    from payoff.algos.dpo import encode_pairs
    from payoff.models.lm import ModelConfig, load_lm
    from payoff.models.logprobs import leading_bos, with_bos
    from payoff.rewards.learned import ScalarHeadModel
    from payoff.rollout.generation import encode_prompts

    _gpt2(tmp_path / "bos", bos=True, positions=64)
    model, tok = load_lm(ModelConfig(path=str(tmp_path / "bos")))
    bos = tok.bos_token_id
    assert leading_bos(tok) == [bos] and leading_bos(load_lm(ModelConfig())[1]) == []
    assert with_bos(tok, [bos, 5]) == [bos, 5]  # a template that writes {{ bos_token }}: once
    ids, mask = encode_prompts(tok, ["1+1=", "10+10="])
    starts = [row[m.bool()].tolist()[0] for row, m in zip(ids, mask, strict=True)]
    assert starts == [bos, bos] and int(mask[0].sum()) == 5  # BOS + 4 characters
    sft = payoff.SFT(
        model={"path": str(tmp_path / "bos")},
        task=[{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(6) for b in range(6)],
        steps=1,
    )
    batch = sft.batch(sft.task.train_rows[:2])
    assert batch["input_ids"][:, 0].tolist() == [bos, bos]
    assert (batch["labels"][:, 0] != bos).all()  # BOS is context, never a target
    assert encode_pairs(tok, [{"prompt": "1+1=", "chosen": "2", "rejected": "3"}])[0][0][0] == bos
    scorer = ScalarHeadModel(model, tok)
    assert scorer.encode(["1+1="], ["2"])["input_ids"][0, 0].item() == bos
    result = sft.learn().evaluate(2, split="test", k=())  # generation runs with it too
    assert 0.0 <= result.accuracy <= 1.0
