import ast
import dataclasses
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Union, get_args, get_origin, get_type_hints

import pytest

import payoff.core.config
from payoff.core.config import apply_overrides, field_range, from_dict, parse_override
from payoff.core.errors import ConfigError, RunError
from payoff.core.schedules import Schedule


@dataclass
class Inner:
    size: int = 4
    name: str = "x"


@dataclass
class Outer:
    lr: float = 0.1
    steps: int = 10
    flag: bool = False
    mode: Literal["a", "b"] = "a"
    inner: Inner = field(default_factory=Inner)
    maybe: int | None = None


def test_defaults_and_nested_values():
    config = from_dict(Outer, {"lr": 1, "inner": {"size": 8}, "maybe": 3})
    assert config.lr == 1.0 and isinstance(config.lr, float)
    assert config.inner.size == 8 and config.inner.name == "x"
    assert config.maybe == 3


def test_unknown_key_lists_valid_keys_and_suggests():
    with pytest.raises(ConfigError) as err:
        from_dict(Outer, {"step": 5})
    message = str(err.value)
    assert "'step'" in message and "Did you mean 'steps'" in message
    assert "flag, inner, lr, maybe, mode, steps" in message


def test_unknown_nested_key_names_the_full_path():
    with pytest.raises(ConfigError, match=r"'inner.sise'.*Did you mean 'size'"):
        from_dict(Outer, {"inner": {"sise": 3}})


def test_wrong_type_names_key_value_and_type():
    with pytest.raises(ConfigError, match=r"config key 'steps' must be int, got 'many' \(str\)"):
        from_dict(Outer, {"steps": "many"})
    with pytest.raises(ConfigError, match=r"'flag' must be bool"):
        from_dict(Outer, {"flag": 1})


def test_literal_lists_choices():
    with pytest.raises(ConfigError, match=r"'mode' must be one of 'a', 'b', got 'c'"):
        from_dict(Outer, {"mode": "c"})


def test_overrides_parse_yaml_values_and_nest():
    assert parse_override("a.b=1e-3") == (["a", "b"], 1e-3)
    data = apply_overrides({"inner": {"size": 1}}, ["inner.size=5", "flag=true", "inner.name=abc"])
    assert data == {"inner": {"size": 5, "name": "abc"}, "flag": True}
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("nonsense")


def test_schedules():
    linear = Schedule(start=1.0, end=0.0, fraction=0.5)
    assert linear(0.0) == 1.0 and linear(0.25) == pytest.approx(0.5) and linear(0.9) == 0.0
    exponential = Schedule(start=1.0, end=0.01, fraction=1.0, kind="exponential")
    assert exponential(0.5) == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="fraction"):
        from_dict(Schedule, {"fraction": 0})


def test_every_shipped_recipe_parses_and_resolves():
    """`payoff recipes` reads every file, and each recipe builds a valid config (no training)."""
    from payoff import train
    from payoff.recipes import list_recipes, load_recipe

    described = dict(list_recipes())
    assert described and all(described.values()), "every recipe needs a one-line description"
    for name in described:
        _, data = load_recipe(name)
        if data.get("kind") == "experiment":
            for member in data["members"]:
                train.resolve(member["recipe"], member.get("overrides", []))
        else:
            train.resolve(name)


def test_a_yaml_alias_bomb_is_one_clear_error(tmp_path, capsys):
    """578 bytes of nested aliases stand for 10**9 values: `payoff train` and `payoff report`
    on such a config.yaml ran out of memory after a minute, with a traceback."""
    from payoff.cli import main
    from payoff.core.config import load_yaml
    from payoff.track.run import Run

    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 10)}]" for k in range(1, 9)
    ]
    bomb = tmp_path / "laughs.yaml"
    bomb.write_text("algo: ppo\nenv: {id: CartPole-v1}\n" + "\n".join(levels) + "\n")
    with pytest.raises(ConfigError, match="aliases .* expand to more than 1,000,000 values"):
        load_yaml(bomb)
    assert main(["train", str(bomb)]) == 2
    assert "expand to more than" in capsys.readouterr().err
    run = Run.create(tmp_path / "runs", "x", {"algo": "ppo"})
    (run.path / "config.yaml").write_text(bomb.read_text())
    with pytest.raises(RunError, match="expand to more than"):
        _ = run.config
    # a config that uses an alias or two, as people do, loads as before
    (tmp_path / "ok.yaml").write_text("lr: &lr 0.001\nlearning_rate: {start: *lr, end: *lr}\n")
    assert load_yaml(tmp_path / "ok.yaml")["learning_rate"] == {"start": 0.001, "end": 0.001}


# Numeric config keys of the algorithms' configs without a range, each for a reason; every
# other one declares its range beside it (`field(..., metadata=in_range(...))`).
NO_RANGE = {
    # any value: returns, rewards and their weights may be negative; log-scale starts
    "VectorAgentKeys.stop_at_return",
    "ESConfig.stop_at_return",
    "MBRLConfig.stop_at_return",
    "RewardSpec.weight",
    "RewardSpec.on_error",
    "CanaryConfig.pass_reward",
    "QLearningConfig.initial_q",
    "OnPolicyConfig.log_std_init",
    "ImitationConfig.log_std_init",
    "SACConfig.target_entropy",
    # checked by the config's validate(): the bound depends on another key, or the message
    # says more than a range would
    "SACConfig.alpha",
    "EnvConfig.max_episode_steps",
    "GRPOConfig.microbatch_size",
    "GRPOConfig.overlong_buffer",
    "RecurrentPPOConfig.sequence_length",
    # checked by validate() in files being refactored (#58): ranges once they are annotated
    "RecurrentPPOConfig.rnn_hidden",
    "GRPOConfig.dynamic_sampling_max_batches",
    "GRPOConfig.max_staleness",
    "GRPOConfig.mismatch_cap",
    "GRPOConfig.overlong_penalty",
    # unchecked, in files being refactored (#58): their owner decides
    "PPOConfig.target_kl",
    "AgentGRPOConfig.judge_weight",
    "AgentGRPOConfig.malformed_cost",
    "AgentGRPOConfig.token_cost",
    "AgentGRPOConfig.tool_cost",
    "AgentGRPOConfig.turn_cost",
    "DemoSFTConfig.demonstrations",
}


def _config_classes():
    """Every config dataclass of every registered algorithm, nested ones too (core's own, the
    Schedule, left out: its start and end take the range of the key that holds it)."""
    from payoff.algos import available_algorithms, get_algorithm

    def nested(tp):
        if get_origin(tp) in (Union, types.UnionType, list, tuple, dict):
            return [cls for arg in get_args(tp) for cls in nested(arg)]
        return [tp] if isinstance(tp, type) and dataclasses.is_dataclass(tp) else []

    found, todo = [], [get_algorithm(name).config_class for name in available_algorithms()]
    while todo:
        cls = todo.pop()
        if cls in found or cls.__module__.startswith("payoff.core."):
            continue
        found.append(cls)
        todo += [made for tp in get_type_hints(cls).values() for made in nested(tp)]
    return found


def _numeric(tp):
    if get_origin(tp) in (Union, types.UnionType, list, tuple):
        return any(_numeric(arg) for arg in get_args(tp) if arg is not type(None))
    return tp in (int, float, Schedule)


def test_every_numeric_key_of_every_algorithm_declares_its_range():
    unranged = set()
    for cls in _config_classes():
        hints = get_type_hints(cls)
        for key in dataclasses.fields(cls):
            if key.metadata.get("python_only") or key.metadata.get("replaced"):
                continue
            if _numeric(hints[key.name]) and field_range(key) is None:
                owner = next(
                    c for c in cls.__mro__ if key.name in vars(c).get("__annotations__", {})
                )
                unranged.add(f"{owner.__name__}.{key.name}")
    missing, stale = sorted(unranged - NO_RANGE), sorted(NO_RANGE - unranged)
    assert not missing, f"declare a range beside each (metadata=in_range(...)): {missing}"
    assert not stale, f"these keys have a range now: strike them from NO_RANGE: {stale}"


def test_core_names_no_algorithm_key():
    """core/config.py checks ranges the fields declare; it holds no table of keys by name.
    (OTHER_LIBRARIES maps other libraries' names, SB3's n_steps or TRL's num_generations, to
    payoff's for the hint after an unknown key; it declares no range.)"""
    keys = {key.name for cls in _config_classes() for key in dataclasses.fields(cls)}
    tree = ast.parse(Path(payoff.core.config.__file__).read_text())
    hints = next(
        node
        for node in tree.body
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "OTHER_LIBRARIES"
    )
    skipped = {id(node) for node in ast.walk(hints)}
    named = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skipped
    }
    assert "learning_rate" in keys and "gamma" in keys
    assert not named & keys, f"core/config.py names algorithm keys: {sorted(named & keys)}"
