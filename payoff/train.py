"""From a recipe to a finished run: resolve the config, train, then write media and report.

The CLI, the demo and experiment recipes all go through these functions. How a recipe
becomes an algorithm and its config (`resolve`) is in payoff/recipes/resolve.py; it is
importable from here too.
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
from payoff.algos.base import Algorithm
from payoff.algos.loop import LearnInterrupted
from payoff.core.config import MAX_SEED, from_dict, in_range, to_dict
from payoff.core.errors import ConfigError, PayoffError, RunError
from payoff.monitor.detectors import build_monitors
from payoff.recipes import FROM_DEFAULTS, load_recipe
from payoff.recipes.resolve import resolve, trained_on
from payoff.report.figures import draw_comparisons, draw_figures
from payoff.report.page import write_report
from payoff.report.plots import plot_curves
from payoff.track.run import Run


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
    seeds: list[int] = field(default_factory=lambda: [0], metadata=in_range(0, MAX_SEED))


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
    _check_members(name, experiment, overrides)
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
            member_run = _train_member(name, member, seed, overrides, run, media, loggers)
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


def _check_members(name: str, experiment: Experiment, overrides: Sequence[str]) -> None:
    """ConfigError unless the experiment has members, each with a seed, none an experiment,
    each with a config that resolves: every member is checked before any trains."""
    if not experiment.members or not all(member.seeds for member in experiment.members):
        raise ConfigError(
            f"experiment {name!r} needs at least one member, each with at least one seed "
            f"(members: [{{recipe: cartpole-ppo, seeds: [0, 1]}}, ...])"
        )
    for member in experiment.members:
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


def _train_member(
    name: str,
    member: Member,
    seed: int,
    overrides: Sequence[str],
    run: Run,
    media: bool,
    loggers: list[str] | str | None,
) -> Run:
    """Train one member of the experiment `run` with one seed, into its members/ folder; an
    error says which member and seed failed."""
    try:
        return train(
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
