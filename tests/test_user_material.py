"""payoff on a user's own material, from Python and from the CLI: the lazy top-level API,
learn(n) adding steps, numbers for schedules, env instances / factories / vector envs,
`module:EnvId` ids, entry points and wrappers, and recipes pointed at another env."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

import payoff
from payoff.cli import main
from payoff.core.config import to_dict
from payoff.core.errors import ConfigError, EnvError
from payoff.core.imports import import_object
from payoff.track.run import Run
from payoff.train import resolve

CORRIDOR = textwrap.dedent(
    '''
    import gymnasium as gym
    import numpy as np


    class Corridor(gym.Env):
        """Walk right to the end of a corridor of n cells; each step costs a little."""

        metadata = {"render_modes": []}

        def __init__(self, n=4, render_mode=None):
            self.n = n
            self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
            self.action_space = gym.spaces.Discrete(2)
            self.render_mode = render_mode

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.pos = 0
            return np.array([0.0], np.float32), {}

        def step(self, action):
            self.pos = max(0, self.pos + (1 if action == 1 else -1))
            done = self.pos >= self.n
            obs = np.array([self.pos / self.n], np.float32)
            return obs, (1.0 if done else -0.05), done, False, {}


    gym.register("UserCorridor-v0", entry_point=Corridor, max_episode_steps=40)
    '''
)
TINY = {"num_envs": 2, "num_steps": 64, "eval_every": 0, "final_eval_episodes": 3}


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module of the user's, in the working folder (as `payoff train` from that folder sees it)."""
    (tmp_path / "user_envs.py").write_text(CORRIDOR)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "user_envs", raising=False)
    yield tmp_path
    gym.registry.pop("UserCorridor-v0", None)


def test_top_level_api_is_lazy_and_complete():
    code = "import sys, payoff; print('payoff.algos.ppo' in sys.modules); print(payoff.PPO.name)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "ppo"]
    for name in ("PPO", "DQN", "A2C", "QLearning", "GRPO", "SFT", "DPO", "RewardModel", "BC"):
        assert getattr(payoff, name).config_class is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        payoff.Nope  # noqa: B018


def test_import_payoff_registers_its_envs_for_other_code():
    code = "import payoff, gymnasium as gym; print(gym.make('payoff/KartTrack-v0').spec.id)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "payoff/KartTrack-v0"


def test_learn_adds_steps_and_plans_schedules_over_them():
    agent = payoff.PPO("CartPole-v1", learning_rate=1e-3, **TINY)
    assert agent.config.learning_rate.start == agent.config.learning_rate.end == 1e-3
    agent.learn(256)  # whole rollouts: the step counter ends at or just past the target
    assert agent.step >= 256 and agent.config.total_steps == 256  # not the 100k default
    first = agent.step
    agent.learn(256)
    assert agent.step >= first + 256 and agent.config.total_steps == first + 256
    planned = payoff.PPO("CartPole-v1", total_steps=2048, **TINY).learn(256)
    assert planned.step < 2048 and planned.config.total_steps == 2048  # a chosen length stays
    for bad in (-5, 2.5, "10"):
        with pytest.raises(ConfigError, match="learn\\(\\) takes a whole number of steps"):
            agent.learn(bad)
    before = agent.step
    assert agent.learn(1.28e2).step > before  # SB3's learn(1e5): a whole float is a count


def test_env_instance_factory_and_vector_env(user_module):
    Corridor = import_object("user_envs:Corridor", "test")  # noqa: N806

    instance = Corridor(n=3)
    agent = payoff.PPO(instance, **TINY).learn(128)
    assert agent.config.env.id == "user_envs:Corridor"
    assert "factory" not in to_dict(agent.config)["env"]  # Python objects stay out of YAML
    assert payoff.PPO(lambda: Corridor(n=3), **TINY).learn(128).step >= 128
    vector = gym.vector.SyncVectorEnv([lambda: Corridor(n=3)] * 3)
    from_vector = payoff.PPO(vector, num_steps=32, eval_every=0, final_eval_episodes=2)
    assert from_vector.config.num_envs == 3
    from_vector.learn(96)
    assert from_vector.runner.envs is vector
    with pytest.raises(ConfigError, match="set from Python only"):
        payoff.PPO(env={"id": "CartPole-v1", "factory": "x"})


def test_module_id_entry_point_and_wrappers_learn(user_module):
    by_id = payoff.PPO("user_envs:UserCorridor-v0", **TINY)
    by_entry = payoff.PPO(
        env={
            "entry_point": "user_envs:Corridor",
            "kwargs": {"n": 4},
            "max_episode_steps": 40,
            "wrappers": [{"name": "RecordEpisodeStatistics"}],
        },
        seed=1,
        **TINY,
    )
    assert by_entry.config.env.id == "user_envs:Corridor"
    for agent in (by_id, by_entry):
        before = agent.evaluate(5).mean_return
        agent.learn(4096)
        # measured: the untrained policy wanders (about -2 on 40 steps); trained, it walks
        # straight right in 4 steps (0.85)
        assert before < 0 and agent.evaluate(5).mean_return >= 0.8


def test_bad_user_env_names_the_value_and_what_is_valid(user_module):
    cases = [
        ({"id": "missing_module:Env-v0"}, "no module named 'missing_module'"),
        ({"id": "user_envs:Nope-v0"}, "did not register 'Nope-v0'"),
        ({"entry_point": "user_envs:Corridr"}, "Did you mean 'Corridor'"),
        ({"entry_point": "user_envs"}, "must look like 'module:Name'"),
        ({"wrappers": [{"name": "NormaliseObservation"}]}, "Did you mean 'NormalizeObservation'"),
    ]
    for env, message in cases:
        with pytest.raises(EnvError, match=message):
            payoff.PPO(env=env, **TINY)
    with pytest.raises(EnvError, match="rejected its arguments"):
        payoff.PPO(env={"entry_point": "user_envs:Corridor", "kwargs": {"size": 3}}, **TINY)


def test_cli_trains_and_evaluates_a_user_env_by_module_id(user_module, capsys):
    out = user_module / "runs"
    overrides = ["env.id=user_envs:UserCorridor-v0", "total_steps=2048", "eval_every=1024"]
    assert main(["train", "cartpole-ppo", *overrides, "--no-media", "--out", str(out)]) == 0
    (run_dir,) = out.iterdir()
    run = Run.open(run_dir)
    assert "tuned for CartPole-v1" in run.config["recipe_note"]
    assert any(e["event"]["kind"] == "recipe_retargeted" for e in run.events())
    sys.modules.pop("user_envs", None)
    gym.registry.pop("UserCorridor-v0", None)  # eval imports the module again
    assert main(["eval", str(run_dir), "--episodes", "3"]) == 0
    assert "mean return" in capsys.readouterr().out.lower()


def test_recipe_pointed_at_another_env_falls_back_on_defaults():
    _, config, resolved = resolve("cartpole-ppo", ["env.id=Acrobot-v1", "total_steps=50000"])
    note = resolved["recipe_note"]
    assert "tuned for CartPole-v1" in note and "num_envs" in note and "stop_at_return" in note
    default = payoff.PPO.config_class()
    assert config.num_envs == default.num_envs and config.stop_at_return is None
    assert config.total_steps == 50_000  # what the user named is kept
    _, same, resolved = resolve("cartpole-ppo", ["total_steps=50000"])
    assert "recipe_note" not in resolved and same.num_envs == 64


def test_vector_env_without_env_fns_is_refused():
    class Opaque(gym.vector.VectorEnv):
        num_envs = 2

    with pytest.raises(EnvError, match="without env_fns"):
        payoff.PPO(Opaque(), **TINY)
    assert np.isfinite(
        payoff.PPO(gym.make("CartPole-v1"), **TINY).learn(128).evaluate(2).mean_return
    )


def test_make_vec_of_a_registered_id_trains_evaluates_and_reloads(tmp_path):
    # CartPole's own vector env keeps no env_fns; a sync make_vec keeps a spent generator
    native = gym.make_vec("CartPole-v1", num_envs=2)
    agent = payoff.PPO(native, **TINY).learn(128)
    assert agent.config.env.id == "CartPole-v1" and not agent.config.env.python_env
    assert agent.envs is native and len(agent.evaluate(2).episode_returns) == 2
    lander = gym.make_vec(
        "LunarLander-v3", num_envs=2, vectorization_mode="sync", max_episode_steps=30
    )
    agent = payoff.PPO(lander, **TINY)
    assert agent.config.env.kwargs == {} and agent.config.env.max_episode_steps == 30
    agent.save(tmp_path / "lander.pt")
    again = payoff.PPO.load(tmp_path / "lander.pt")  # rebuilt from the id: no env= needed
    assert max(again.evaluate(2).episode_lengths) <= 30


# ---- your own reward functions, from Python -------------------------------------------


def digits(prompts, completions, **kwargs):
    """Share of characters that are digits: a smooth reward the tiny model can move."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def test_reward_callables_from_python_train_and_stay_out_of_yaml(tmp_path):
    from payoff.algos.grpo import GRPO
    from payoff.models.lm import ModelConfig, load_lm, save_lm

    model, tokenizer = load_lm(ModelConfig(), seed=0)
    model_dir = str(save_lm(model, tokenizer, tmp_path / "model"))
    grpo = GRPO(
        model={"path": model_dir},
        rewards=[digits, {"name": "math", "weight": 0.5}],
        prompts_per_step=4,
        group_size=4,
        max_new_tokens=4,
        eval_every=2,
        final_eval_k=[1],
        task={"eval_size": 4},
    ).learn(2)
    spec = grpo.config.rewards[0]
    assert spec.function is digits and spec.name.endswith(":digits") and spec.key == "digits"
    assert to_dict(grpo.config)["rewards"][0] == {
        "name": spec.name,
        "weight": 1.0,
        "on_error": 0.0,
        "timeout": 60.0,
        "options": {},
        "label": "",
    }
    logged = [r for r in grpo.history if "reward/digits" in r]
    assert len(logged) == 2 and all(0.0 <= r["reward/digits"] <= 1.0 for r in logged)


def _mix(fn, **options):
    from payoff.rewards.base import RewardMix, RewardSpec

    return RewardMix([RewardSpec.from_value(fn)], **options)


def test_wrong_length_or_type_stops_with_the_function_named():
    from payoff.rewards.base import RewardFunctionError

    def one_score(prompts, completions, **kwargs):
        return [1.0]

    def a_float(prompts, completions, **kwargs):
        return 0.5

    with pytest.raises(
        RewardFunctionError, match="'one_score' returned 1 scores for 3 completions"
    ):
        _mix(one_score)(["a", "b", "c"], ["1", "2", "3"])
    with pytest.raises(RewardFunctionError, match="'a_float' returned float"):
        _mix(a_float)(["a", "b"], ["1", "2"])


def test_text_scores_are_not_numbers(capsys):
    # float("1") would read it, but a function returning text has a bug worth showing
    def texty(prompts, completions, **kwargs):
        return [str(len(c)) for c in completions]

    result = _mix(texty)(["a", "b"], ["x", "yy"])
    assert result.scores["texty"] == [0.0, 0.0] and result.errors["texty"] == 2
    assert "'texty' returned '1', not a number or None" in capsys.readouterr().err


def test_scores_that_overflow_or_hang_when_read_are_the_function_failing(capsys):
    """The scores are read (list(), float()) inside the timed call: 10**400 used to raise
    OverflowError out of the reward call, and a score whose __float__ never returns held the
    trainer past the function's timeout."""
    import time

    from payoff.rewards.base import RewardMix, RewardSpec

    def huge(prompts, completions, **kwargs):
        return [10**400 for _ in completions]

    result = _mix(huge)(["a", "b"], ["1", "2"])
    assert result.scores["huge"] == [0.0, 0.0] and result.errors["huge"] == 2
    assert "'huge' returned 1000" in capsys.readouterr().err

    class Endless:
        def __float__(self):
            time.sleep(30)
            return 1.0

    def stalls(prompts, completions, **kwargs):
        return [Endless() for _ in completions]

    spec = RewardSpec.from_value(stalls)
    spec.timeout = 0.5
    mix = RewardMix([spec])
    started = time.perf_counter()
    result = mix(["a"], ["1"])
    assert time.perf_counter() - started < 5 and result.errors["stalls"] == 1
    assert "ran past its timeout" in capsys.readouterr().err


def test_a_raising_function_is_shown_once_and_stops_when_it_always_fails(capsys):
    from payoff.rewards.base import RewardFunctionError

    def picky(prompts, completions, **kwargs):
        if any(c == "bad" for c in completions):
            raise ValueError("cannot score 'bad'")
        return [1.0] * len(completions)

    mix = _mix(picky, max_failed_batches=2)
    result = mix(["p1", "p2"], ["ok", "bad"])
    assert result.scores["picky"] == [1.0, 0.0] and result.errors["picky"] == 1
    shown = capsys.readouterr().err
    assert "reward function 'picky' raised ValueError: cannot score 'bad'" in shown
    assert "'p2'" in shown and "'bad'" in shown
    mix(["p1"], ["bad"])
    assert capsys.readouterr().err == ""  # shown once; later errors go to the metrics
    mix(["p1"], ["ok"])  # a good batch resets the count
    mix(["p1"], ["bad"])
    with pytest.raises(RewardFunctionError, match="'picky' failed on every row of 2 batches"):
        mix(["p1", "p2"], ["bad", "bad"])


def test_rewards_that_score_no_row_are_said_and_stop_the_run(capsys):
    # TRL users' complaint: all-NaN (or all-None) rewards silently read as 0.
    from payoff.rewards.base import RewardFunctionError

    def math_only(prompts, completions, kind, **kwargs):
        return [1.0 if k == "math" else float("nan") for k in kind]

    events: list[str] = []
    mix = _mix(math_only, max_failed_batches=2)
    mix.on_event = lambda kind, message, **evidence: events.append(kind)
    result = mix(["p1", "p2"], ["a", "b"], kind=["poem", "poem"])
    assert result.total == [0.0, 0.0] and result.not_applicable == 2
    assert "no reward function ('math_only') scored any of the 2 completions" in (
        capsys.readouterr().err
    )
    assert events == ["reward_unscored"]
    assert mix(["p1"], ["a"], kind=["math"]).total == [1.0]  # one scored row resets the count
    mix(["p1"], ["a"], kind=["poem"])
    with pytest.raises(RewardFunctionError, match="scored any completion in 2 batches in a row"):
        mix(["p1"], ["a"], kind=["poem"])


def test_a_loaded_model_and_tokenizer_train_from_python(tmp_path, monkeypatch):
    from payoff.algos.grpo import GRPO
    from payoff.models.lm import ModelConfig, load_lm

    monkeypatch.setenv("PAYOFF_CACHE", str(tmp_path / "cache"))
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(10)]
    grpo = GRPO(
        model=(model, tokenizer),
        task=rows,
        rewards=[digits],
        prompts_per_step=4,
        group_size=4,
        max_new_tokens=4,
        eval_every=1,
        final_eval_k=[1],
    )
    folder = grpo.config.model.path
    assert folder.startswith(str(tmp_path / "cache" / "from-python"))
    grpo.learn(1)
    assert any("reward/digits" in r for r in grpo.history)
    with pytest.raises(ConfigError, match=r"needs its tokenizer: pass model=\(model, tokenizer\)"):
        GRPO(model=model, task=rows)


@pytest.mark.slow
def test_a_recipe_pointed_at_acrobot_learns_on_the_general_defaults(tmp_path):
    """cartpole-ppo's CartPole tuning left Acrobot at -500 (no learning at all); its
    settings are now left out and PPO's defaults reach -81 in 60k steps (seed 0, ~15 s)."""
    from payoff.train import train

    run = train(
        "cartpole-ppo",
        ["env.id=Acrobot-v1", "total_steps=60000"],
        seed=0,
        out=tmp_path,
        media=False,
        loggers="none",
    )
    assert run.summary()["final_eval"]["mean_return"] >= -100  # random policy: -500


def test_rl_on_rows_without_prompts_is_one_clear_error():
    from payoff.algos.grpo import GRPO

    rows = [{"text": f"{a} plus {a} is {2 * a}"} for a in range(30)]
    with pytest.raises(
        ConfigError, match="grpo samples completions of prompts, but 2[0-9] training"
    ):
        GRPO(task=rows)
