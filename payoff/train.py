"""From a recipe to a finished run: resolve the config, train, then write media and report.

The CLI, the demo and experiment recipes all go through these functions.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from payoff.algos import get_algorithm
from payoff.algos.agent import Agent
from payoff.algos.base import Algorithm, run_defaults
from payoff.algos.loop import LearnInterrupted
from payoff.core.config import apply_overrides, from_dict, parse_override, to_dict
from payoff.core.errors import ConfigError, PayoffError, RunError
from payoff.envs.tasks import TASKS
from payoff.monitor.detectors import build_monitors
from payoff.recipes import FROM_DEFAULTS, load_recipe, recipe_file
from payoff.report.figures import draw_comparisons, draw_figures
from payoff.report.page import write_report
from payoff.report.plots import plot_curves
from payoff.track.run import Run


def resolve(
    recipe: str, overrides: list[str] | tuple[str, ...] = (), seed: int | None = None
) -> tuple[type[Algorithm], Any, dict[str, Any]]:
    """Recipe + overrides + defaults -> (algorithm class, config, resolved mapping for config.yaml).

    recipe: a YAML file, a shipped recipe's name, or an algorithm's name: that algorithm's
    config defaults, titled by the algorithm and what it trains on ("ppo on Acrobot-v1")."""
    name, data = load_recipe(recipe)
    if data.get("kind") == "experiment":
        raise ConfigError(
            f"{name!r} is an experiment recipe; run it with train_experiment (payoff train does this)"
        )
    data = dict(data)
    algo = data.pop("algo", None)
    if algo is None:
        raise ConfigError(
            f"recipe {name!r} has no 'algo' key; say which algorithm to run (e.g. algo: ppo)"
        )
    description = data.pop("description", "")
    label = data.pop("label", None)
    from_defaults = bool(data.pop(FROM_DEFAULTS, False))
    # A run's config.yaml trains again as a recipe: what it records about how it was made
    # (the recipe's name, the overrides already applied, a note) is not config
    for bookkeeping in ("recipe", "overrides", "recipe_note"):
        data.pop(bookkeeping, None)
    written = list(overrides)  # all of them, monitors' too, for the record
    if from_defaults:
        overrides = _own_data_task(overrides)
    chosen_by = {*data, *(parse_override(o)[0][0] for o in overrides)}  # set, not by defaults
    monitors, overrides = _monitor_overrides(data.pop("monitors", None), overrides)
    given = [value for keys, value in map(parse_override, overrides) if keys == ["seed"]]
    if seed is not None and any(value != seed for value in given):
        raise ConfigError(
            f"two seeds: seed={given[-1]} among the overrides and {seed} (--seed, or an "
            f"experiment member's seeds); give one"
        )
    all_overrides = list(overrides) + ([f"seed={seed}"] if seed is not None else [])
    data, note = _retarget(name, str(algo), data, all_overrides)
    data = _without_other_task_options(data, all_overrides)
    if (path := recipe_file(recipe)) is not None:  # its paths are also found beside it
        data = _absolute_paths(data, folder=path.expanduser().resolve().parent)
    data = _absolute_paths(apply_overrides(data, all_overrides))
    cls = get_algorithm(str(algo))
    config: Any = from_dict(cls.config_class, with_run_defaults(cls, data))
    resolved: dict[str, Any] = {"recipe": name, "description": description, "algo": algo}
    if from_defaults:  # no recipe: titled by what it trains on
        description, chosen = _defaults_title(cls, to_dict(config), chosen_by)
        resolved = {"description": description, "algo": cls.name, FROM_DEFAULTS: True}
        note = note or chosen
    # what the run changed from the recipe (reports, plot labels)
    resolved["overrides"] = written + ([f"seed={seed}"] if seed is not None else [])
    if note:
        resolved["recipe_note"] = note
    if label:
        resolved["label"] = label
    if monitors:
        build_monitors(monitors)  # check the specs now, before any training
        resolved["monitors"] = monitors
    resolved.update(to_dict(config))
    return cls, config, resolved


def with_run_defaults(cls: type[Algorithm], data: dict[str, Any]) -> dict[str, Any]:
    """A run's config keys with the evaluations a `payoff train` run makes wherever the
    recipe and overrides leave them unset (the config class's `run_defaults`: a final
    evaluation of 50 episodes, SAC's every 5,000 steps, ...). In Python the same keys
    default to off, so that learn(n) only trains; every run built from keys goes through
    here, so a run's curves, summary and report keep their evaluations."""
    return {**run_defaults(cls.config_class), **data}


def trained_on(config: dict[str, Any]) -> tuple[str, str]:
    """(what a config trains on, the key that names it): ('Acrobot-v1', 'env.id'),
    ('pairs.jsonl', 'preferences.path'), ('addition', 'task.name'), ('tictactoe', 'game');
    ('', '') where it names none of them."""
    prefs = config.get("preferences")
    if isinstance(prefs, dict) and prefs.get("path"):
        return Path(str(prefs["path"])).name, "preferences.path"
    task = config.get("task")
    if isinstance(task, dict) and task.get("name"):
        if task["name"] == "jsonl" and task.get("data"):
            return Path(str(task["data"])).name, "task.data"
        return str(task["name"]), "task.name"
    env = config.get("env")
    if isinstance(env, dict):
        if env.get("entry_point"):
            return str(env["entry_point"]), "env.entry_point"
        kwargs = env.get("kwargs")
        if isinstance(kwargs, dict) and isinstance(kwargs.get("env_id"), str):
            return kwargs["env_id"], "env.kwargs.env_id"  # a PettingZoo env through its adapter
        if env.get("id"):
            return str(env["id"]), "env.id"
    if isinstance(config.get("game"), str):
        return config["game"], "game"
    return "", ""


def _defaults_title(
    cls: type[Algorithm], config: dict[str, Any], named: set[str]
) -> tuple[str, str | None]:
    """A run of an algorithm's defaults: its title ('ppo on Acrobot-v1'), and a note saying
    which env or task the defaults chose when no key (`named`: the top-level keys given)
    named one (None when one did)."""
    target, key = trained_on(config)
    title = f"{cls.name} on {target}" if target else cls.name
    if not key or named & {"env", "task", "game", "preferences"}:
        return title, None
    if "preferences" in config:
        other = "preferences=PAIRS.jsonl trains on your pairs"
    elif key.startswith("task"):
        other = "task=NAME or task.data=ROWS.jsonl trains on another"
    else:
        other = f"{key}=... trains on another"
    where = key.split(".")[0]
    return title, (
        f"{title}: no {where} was given, so the one {cls.config_class.__name__}'s defaults "
        f"name ({other})"
    )


def _own_data_task(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """An algorithm's defaults given `task.data=FILE` alone train on that file: task.name
    'jsonl' is added (a recipe names its task, where task.data for another task is an
    error that says to add it)."""
    keys = [parse_override(o)[0] for o in overrides]
    if ["task", "data"] in keys and ["task", "name"] not in keys and ["task"] not in keys:
        return ["task.name=jsonl", *overrides]
    return list(overrides)


def _monitor_overrides(
    monitors: list[Any] | None, overrides: list[str] | tuple[str, ...]
) -> tuple[list[Any] | None, list[str]]:
    """The recipe's monitors after the command line's `monitors=[...]` (replaces them all;
    `monitors=[]` removes them) and `monitors.N.key=value` (changes the Nth, from 0); and
    the other overrides."""
    rest: list[str] = []
    watching = [dict(m) if isinstance(m, dict) else m for m in monitors or []]
    example = "monitors=[{kind: threshold, key: train/kl, above: 0.5}]"
    for text in overrides:
        keys, value = parse_override(text)
        if keys[0] != "monitors":
            rest.append(text)
            continue
        if len(keys) == 1:
            if value in (None, ""):
                value = []
            if not isinstance(value, list):
                raise ConfigError(
                    f"monitors must be a list of monitors, e.g. {example}; got {value!r}"
                )
            watching = value
            continue
        kinds = ", ".join(
            f"{i}: {m.get('kind') if isinstance(m, dict) else m!r}" for i, m in enumerate(watching)
        )
        index = int(keys[1]) if keys[1].isdigit() else -1
        if (
            len(keys) != 3
            or not 0 <= index < len(watching)
            or not isinstance(watching[index], dict)
        ):
            raise ConfigError(
                f"override {text!r}: monitors are changed by number, monitors.N.key=value, "
                f"with N one of the recipe's monitors ({kinds or 'it has none'}); or replaced "
                f"by {example}"
            )
        watching[index][keys[2]] = value
    return (watching if monitors is not None or watching else None), rest


# Config keys whose value may be a file or folder (at any depth: task.data, model.path,
# preferences.path, ...). A run records them absolute, so `payoff eval RUN` and `--resume`
# work from any folder.
_PATH_KEYS = frozenset(
    {
        "path",
        "test_path",
        "data",
        "test_data",
        "ood_data",
        "init_from",
        "expert",
        "reward_model",
        "demonstrations",
    }
)


def _absolute_paths(data: Any, key: str = "", folder: Path | None = None) -> Any:
    """`data` with every relative path under a path key that exists from the working folder
    made absolute, and the file of a reward named 'file.py:function' too. Names that are
    not paths on disk ('kart', 'CartPole-v1', 'module:function') stay as written.

    folder: a recipe file's folder: a path written in the recipe that is not found from the
    working folder but is beside the recipe is taken from there (`payoff train
    exp/mine.yaml` run from the project root finds exp/mine.yaml's data/rows.jsonl)."""
    if isinstance(data, dict):
        return {k: _absolute_paths(v, str(k), folder) for k, v in data.items()}
    if isinstance(data, list):
        return [_absolute_paths(v, key, folder) for v in data]
    if not isinstance(data, str) or not data:
        return data
    if key == "expert" and data in ("kart", "cartpole", "keyboard"):  # shipped experts
        return data

    def found(path: str, exists: Any) -> Path | None:
        if Path(path).expanduser().is_absolute():
            return None
        for base in (Path.cwd(), folder):
            if base is not None and exists(base / path):
                return (base / path).resolve()
        return None

    path_key = key in _PATH_KEYS or key == "preferences" or (key == "task" and data not in TASKS)
    if path_key and (where := found(data, Path.exists)) is not None:  # task: FILE too
        return str(where)
    if key == "name" and ".py:" in data:
        file, function = data.rsplit(":", 1)
        if file.endswith(".py") and (where := found(file, Path.is_file)) is not None:
            return f"{where}:{function}"
    return data


def _retarget(
    name: str, algo: str, data: dict[str, Any], overrides: list[str]
) -> tuple[dict[str, Any], str | None]:
    """A recipe's settings were tuned for its env. When the overrides point it at another env,
    leave those settings out (the algorithm's general defaults apply instead, and any setting
    the overrides name is still set) and say so: a CartPole schedule on Acrobot fails quietly.
    The recipe's env keys go too (its kwargs, wrappers, episode limit, and its id or entry
    point): FrozenLake's map_name means nothing to CliffWalking.
    """
    recipe_env = data.get("env")
    if not isinstance(recipe_env, dict):
        return data, None
    keys_named = [parse_override(o)[0] for o in overrides]
    env_overrides = [o for o, keys in zip(overrides, keys_named, strict=True) if keys[0] == "env"]
    yours = apply_overrides({}, env_overrides).get("env", {})  # only what the overrides wrote
    target = apply_overrides({"env": recipe_env}, env_overrides)["env"]
    if not isinstance(target, dict) or not isinstance(yours, dict):
        return data, None  # env=<an id string>: the config reads it as the env's id
    named_env = set(yours)
    before = recipe_env.get("entry_point") or recipe_env.get("id")
    if "entry_point" in named_env:
        after = target.get("entry_point")
    elif "id" in named_env:
        after = target.get("id")
    else:
        return data, None  # the recipe's own env, with some of its keys changed
    if before == after:
        return data, None
    named = {keys[0] for keys in keys_named}
    dropped = [k for k in data if k != "env" and k not in named]
    dropped += [f"env.{k}" for k in recipe_env if k not in named_env]
    env = yours
    note = (
        f"recipe {name!r} was tuned for {before}; on {after} its settings for that env "
        f"({', '.join(dropped)}) are left out and {algo}'s defaults apply. Name any of them "
        f"as key=value to keep it."
    )
    kept = {k: v for k, v in data.items() if k not in dropped}
    return {**kept, "env": env}, note


def _without_other_task_options(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The recipe less its task.options when an override names another task: those options
    are the recipe's task's knobs (a jsonl task takes none)."""
    task = data.get("task")
    names = [value for keys, value in map(parse_override, overrides) if keys == ["task", "name"]]
    if not isinstance(task, dict) or not names or names[-1] == task.get("name"):
        return data
    return {**data, "task": {k: v for k, v in task.items() if k != "options"}}


def train(
    recipe: str,
    overrides: list[str] | tuple[str, ...] = (),
    seed: int | None = None,
    out: str | Path = "runs",
    media: bool = True,
    label: str | None = None,
    loggers: list[str] | str | None = None,
) -> Run:
    """Train a recipe into a new run directory; returns the run.

    loggers: metric loggers besides metrics.jsonl ('tensorboard', 'wandb', 'mlflow', or
        'none'); None = $PAYOFF_LOGGERS, else TensorBoard (docs/tracking.md).
    """
    _, data = load_recipe(recipe)
    if data.get("kind") == "experiment":
        return train_experiment(recipe, overrides, out=out, media=media, loggers=loggers)
    cls, config, resolved = resolve(recipe, overrides, seed)
    if label:
        resolved["label"] = label
    algorithm = cls(config=config)  # built first, so a bad env leaves no run directory behind
    # An experiment's members are named by their label and seed: a dozen folders of one
    # recipe's name could not be told apart. A run of an algorithm's defaults: ppo-Acrobot-v1
    if label:
        name = f"{label}-seed{resolved.get('seed')}"
    elif resolved.get(FROM_DEFAULTS):
        name = "-".join(filter(None, (resolved["algo"], trained_on(resolved)[0])))
    else:
        name = resolved["recipe"]
    run = Run.create(out, name, resolved, loggers=loggers)
    if "recipe_note" in resolved:  # said once the config has proved buildable
        print(f"note: {resolved['recipe_note']}", file=sys.stderr)
        run.event(0, "recipe_retargeted", resolved["recipe_note"], severity="info")
    algorithm.run = run
    algorithm.attach_monitors(build_monitors(resolved.get("monitors")))
    return _learn_and_finish(algorithm, run, media)


def resume(
    path: str | Path,
    media: bool = True,
    loggers: Sequence[str] | str | None = None,
    total: int | None = None,
) -> Run:
    """Continue a run from its latest checkpoint, in the same directory.

    A run that already finished is returned as it is (see `finished_step`): resuming it
    again must not evaluate it, or write its summary, a second time.
    loggers: as `train`'s; None keeps the ones the run was started with.
    total: train on to this length, in the unit of the algorithm's length key
        (`total_key`: total_steps, total_episodes, iterations, ...): a finished run trains
        further and is evaluated again at its new end (see `_extend`).
    """
    run = Run.open(path, loggers)
    refuse_experiment(run, "resume")
    if finished_step(run) is not None and total is None:
        return run  # (a finished run may be read-only: nothing to lock or write)
    run.hold()  # before reading where it stands: another process may be training it
    try:
        if finished_step(run) is not None and total is None:  # finished while we waited
            run.release()
            return run
        algo = run.config.get("algo")
        if not algo:
            raise RunError(
                f"{str(path)!r} has no 'algo' in its config.yaml; cannot tell what to resume"
            )
        algorithm = get_algorithm(str(algo)).from_run(run)
        if total is not None:
            _extend(algorithm, run, total)
        halted = run.summary().get("halted")
        if isinstance(halted, dict):  # training on past an alarm is the user's call: say it
            print(
                f"note: this run was halted by the {halted.get('alarm', '?')} alarm at step "
                f"{halted.get('step', '?')}; it trains on from its checkpoint, and that alarm's "
                f"monitor, having fired, stays quiet",
                file=sys.stderr,
            )
            run.drop_summary_keys("halted")
        # monitors are functions of the metric records: replaying the kept ones restores them
        algorithm.attach_monitors(build_monitors(run.config.get("monitors")), replay=run.records())
    except BaseException:
        run.release()
        raise
    return _learn_and_finish(algorithm, run, media)


def refuse_experiment(run: Run, what: str) -> None:
    """RunError naming the member runs when `run` is an experiment: it trained several runs
    and holds no model of its own to evaluate, play or resume."""
    if run.config.get("kind") != "experiment":
        return
    members = run.summary().get("members")
    if not isinstance(members, list):  # stopped before its end: the members made so far
        folder = run.path / "members"
        members = sorted(str(p) for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    shown = ", ".join(str(m) for m in members[:4]) or "none yet"
    more = f" and {len(members) - 4} more in {run.path / 'members'}" if len(members) > 4 else ""
    raise RunError(
        f"{str(run.path)!r} is an experiment ({run.config.get('recipe')}), not one run: it "
        f"holds no model to {what}. {what.capitalize()} one of its {len(members)} member runs "
        f"instead: {shown}{more}"
    )


def load(path: str | Path) -> tuple[Run, Algorithm]:
    """The run at `path` and its algorithm restored from the latest checkpoint."""
    run = Run.open(path)
    refuse_experiment(run, "evaluate or play")
    algo = run.config.get("algo")
    if not algo:
        raise RunError(f"{str(path)!r} has no 'algo' in its config.yaml")
    cls = get_algorithm(str(algo))
    payload, _ = run.load_checkpoint(cls.name)
    return run, cls._from_payload(payload, source=run.checkpoint_path())


def _extend(algorithm: Algorithm, run: Run, total: int) -> None:
    """Set the run's length to `total` to train it further (SB3's learn(...,
    reset_num_timesteps=False)). Schedules span the new length, as a run planned that long
    would: a learning rate annealed to its end value by the old end rises again. A run that
    stopped because it was solved (stop_at_return) trains on until its next evaluation
    solves it again, or `total`."""
    key = algorithm.total_key
    if algorithm.extend_refusal or not hasattr(algorithm.config, key):
        raise ConfigError(
            f"a {algorithm.name} run cannot be trained further in place"
            f"{': ' + algorithm.extend_refusal if algorithm.extend_refusal else ''}; "
            f"start a new run"
        )
    before, now = getattr(algorithm.config, key), algorithm.state.step
    if total <= now:
        raise ConfigError(
            f"{key}={total:,} is not past where run {str(run.path)!r} stands ({now:,}); "
            f"pass a larger {key} to train it further"
        )
    setattr(algorithm.config, key, total)
    algorithm.config.validate()
    algorithm.state.solved_at = None
    # unfinished again until the new end: a stop part-way must read as resumable
    run.drop_summary_keys("finished", "finished_step", "final_eval", "final_line")
    config = dict(run.config)
    config[key] = total
    # the run's label in plots and reports lists its overrides: the length is the new one
    overrides = [o for o in config.get("overrides") or [] if not str(o).startswith(f"{key}=")]
    config["overrides"] = [*overrides, f"{key}={total}"]
    run.write_config(config)
    run.event(
        algorithm.progress_step(),
        "extended",
        f"{key} {before:,} -> {total:,}: resumed at {now:,} to train further",
        severity="info",
    )
    algorithm.checkpoint()  # the new length in the checkpoint too, should it stop at once


def finished_step(run: Run) -> int | None:
    """The step at which `run` finished training, or None while it can still be resumed.

    A finished run has `finished_step` in summary.json (runs from before that key: a final
    evaluation there).
    """
    try:
        summary = run.summary()
    except RunError as err:
        raise RunError(f"{err}; delete it to resume the run from its checkpoint") from None
    if "finished_step" in summary:
        return int(summary["finished_step"])
    if summary.get("finished") or "final_eval" in summary:
        return _last_step(run)
    return None


def _last_step(run: Run) -> int:
    records = run.records()
    return int(records[-1]["step"]) if records else 0


def _learn_and_finish(algorithm: Algorithm, run: Run, media: bool) -> Run:
    """Train, then mark the run finished and draw its media; the run's lock (`Run.hold`)
    is taken first when the caller has not taken it, and given back at the end. A stop
    signal is no error here: learn() raises LearnInterrupted (for scripts), and the run
    returns unfinished (`finished_step` None), for the CLI to say how to resume it."""
    run.hold()
    try:
        try:
            algorithm.learn()
        except LearnInterrupted:  # the checkpoint is written; the caller says how to resume
            pass
        finally:
            run.close()
        if algorithm.interrupted and finished_step(run) is None:
            return run
        try:
            step = algorithm.progress_step()
        except NotImplementedError:
            step = _last_step(run)
        run.write_summary(finished=True, finished_step=step)
        if algorithm.interrupted:
            return run
        if media:
            write_media(run, algorithm)
        return run
    finally:
        run.release()


def write_media(run: Run, algorithm: Algorithm) -> None:
    """Pictures, an episode GIF of an agent whose env renders, and the HTML report."""
    draw_figures(run, algorithm)
    if isinstance(algorithm, Agent):
        try:
            algorithm.record_gif(run.media / "episode.gif")
        except (PayoffError, NotImplementedError, ImportError, AttributeError) as err:
            # the env does not render to rgb_array; the report simply has no GIF
            print(f"no episode GIF: {str(err).splitlines()[0][:300]}", file=sys.stderr)
        except Exception as err:  # the env's own render() failed: the run's curves and
            # report are still worth having (it had trained and been evaluated by now)
            first = (str(err).splitlines() or [""])[0][:300]
            print(
                f"no episode GIF: the env's render raised {type(err).__name__}: {first}",
                file=sys.stderr,
            )
    write_report(run)


@dataclass
class Member:
    """One arm of an experiment: a recipe with overrides, run once per seed."""

    recipe: str
    label: str = ""
    overrides: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0])


@dataclass
class Experiment:
    """Several runs and one comparison figure."""

    members: list[Member] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    x: str = "step"


def train_experiment(
    recipe: str,
    overrides: list[str] | tuple[str, ...] = (),
    out: str | Path = "runs",
    media: bool = False,
    loggers: list[str] | str | None = None,
) -> Run:
    """Run every member of an experiment recipe, then draw the comparison figure."""
    name, data = load_recipe(recipe)
    data = dict(data)
    description = data.pop("description", "")
    data.pop("kind")
    experiment = from_dict(Experiment, data)
    if not experiment.members or not all(member.seeds for member in experiment.members):
        raise ConfigError(
            f"experiment {name!r} needs at least one member, each with at least one seed "
            f"(members: [{{recipe: cartpole-ppo, seeds: [0, 1]}}, ...])"
        )
    for member in experiment.members:  # every member's config checked before any trains
        _, member_data = load_recipe(member.recipe)
        if member_data.get("kind") == "experiment":
            raise ConfigError(
                f"experiment {name!r}: member {member.recipe!r} is itself an experiment; "
                f"list its members instead"
            )
        try:
            resolve(member.recipe, [*member.overrides, *overrides], member.seeds[0])
        except ConfigError as err:
            raise ConfigError(f"experiment {name!r}, {_member_name(member)}: {err}") from None
    resolved = {
        "recipe": name,
        "description": description,
        "kind": "experiment",
        "overrides": list(overrides),
        **to_dict(experiment),
    }
    run = Run.create(out, name, resolved, loggers=loggers)
    member_runs, labels = [], []
    started = time.time()
    for member in experiment.members:
        for seed in member.seeds:
            try:
                member_run = train(
                    member.recipe,
                    [*member.overrides, *overrides],
                    seed=seed,
                    out=run.path / "members",
                    media=media,
                    label=member.label or member.recipe,
                    loggers=loggers,
                )
            except PayoffError as err:  # which of several members of one recipe failed
                where = f"experiment {name!r}, {_member_name(member)} (seed {seed})"
                try:
                    named = type(err)(f"{where}: {err}")
                except TypeError:  # an error class that takes more than a message
                    named = PayoffError(f"{where}: {err}")
                raise named from err
            member_runs.append(member_run)
            labels.append(member.label or member.recipe)
            if finished_step(member_run) is None:  # stopped by a signal: stop the experiment
                return run
    if media:
        plot_curves(
            member_runs,
            run.media / "comparison.png",
            metrics=experiment.metrics or None,
            x=experiment.x,
            title=description or name,
            labels=labels,
        )
        draw_comparisons(member_runs, labels, run.media)
    run.write_summary(
        members=[str(r.path) for r in member_runs],
        member_finals=[_final_line(r, label) for r, label in zip(member_runs, labels, strict=True)],
        seconds=round(time.time() - started, 1),
        finished=True,
    )
    if media:
        write_report(run)
    return run


def _member_name(member: Any) -> str:
    """'member B (recipe cartpole-ppo)', or 'member cartpole-ppo' where it has no label."""
    if member.label:
        return f"member {member.label!r} (recipe {member.recipe!r})"
    return f"member {member.recipe!r}"


def _final_line(run: Run, label: str) -> str:
    """One member of an experiment in a line: its label, seed and final evaluation."""
    summary = run.summary()
    final = summary.get("final_line")
    if not final and isinstance(summary.get("final_eval"), dict):
        from payoff.rollout.evaluate import EvalResult

        try:
            final = EvalResult(**summary["final_eval"]).line()
        except TypeError:  # another algorithm's fields
            final = None
    return f"{label} (seed {run.config.get('seed')}): {final or 'no final evaluation'}"
