"""`payoff train | eval | play | plot | report | recipes`.

Overrides (`key=value`) may come anywhere after the recipe, before or after the flags:
`payoff train cartpole-ppo --seed 3 num_envs=32 --no-media clip.end=0`.

Every PayoffError, and every file that cannot be read or written, is printed as one line
(`error: ...`) with exit status 2. A training run stopped by Ctrl-C, SIGTERM or SIGHUP keeps a
checkpoint and exits with the shell's status for that signal: 130, 143 or 129.

One module, over 600 lines, because it is one thing: the command line. Each command's
flags (`_add_train`) stand beside what the command does with them (`_cmd_train`); split into
a parser module and a commands module, every flag would be defined in one file and read in
the other. What the commands call (training, loading, reports) lives below, in train.py and
the packages.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from payoff.core.config import OTHER_LIBRARIES
from payoff.core.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    EnvError,
    PayoffError,
    RunError,
    suggest,
)
from payoff.core.imports import trusting_loaded_code

if TYPE_CHECKING:
    from payoff.track.run import Run


def _os_reason(err: OSError) -> str:
    """'Permission denied: /runs/a' for an OSError (naming a temp file's folder instead)."""
    name = err.filename
    if isinstance(name, str | Path):
        path = Path(name)
        if path.name.startswith(".") and path.name.endswith(".tmp"):  # an atomic write's temp
            path = path.parent
        return f"{err.strerror or err}: {str(path)!r}"
    return str(err.strerror or err)


@contextmanager
def _writing(what: str, advice: str) -> Iterator[None]:
    """Turn a failed write into one error line that says what was being written and what to do."""
    try:
        yield
    except OSError as err:
        raise RunError(f"cannot write {what} ({_os_reason(err)}); {advice}") from None


def _positive(option: str, value: int) -> None:
    if value <= 0:
        raise ConfigError(f"{option} must be a positive number, got {value}")


def _add_recipes(sub: argparse._SubParsersAction) -> None:
    """The `recipes` command: no arguments."""
    p = sub.add_parser(
        "recipes",
        help="list shipped recipes (and the algorithms `payoff train` also takes)",
        description="List shipped recipes with a one-line description, then the algorithms: "
        "`payoff train ALGO key=value ...` trains an algorithm from its defaults.",
    )
    p.set_defaults(func=_cmd_recipes)


def _cmd_recipes(args: argparse.Namespace) -> int:
    from payoff.algos import available_algorithms
    from payoff.recipes import list_recipes

    recipes = list_recipes()
    width = max(len(name) for name, _ in recipes)
    for name, description in recipes:
        print(f"{name:<{width}}  {description}")
    print(
        f"\nAn algorithm's name works too: its defaults, with your keys "
        f"(payoff train ppo env.id=Acrobot-v1, payoff train sft task.data=rows.jsonl). "
        f"Algorithms: {', '.join(available_algorithms())}"
    )
    return 0


def _resume_length(run: Run, recipe: str | None, overrides: list[str]) -> tuple[str, int | None]:
    """(the run's length key, the new length given as KEY=N, or None): the one setting
    --resume takes, to train a run further; anything else is the run's own config."""
    from payoff.algos import get_algorithm
    from payoff.core.config import parse_override

    algo = run.config.get("algo")
    key = get_algorithm(str(algo)).total_key if algo else "total_steps"
    given = [recipe] if recipe else []
    given += overrides
    if not given:
        return key, None
    path, value = parse_override(given[0]) if len(given) == 1 and "=" in given[0] else ([], None)
    if path != [key]:
        raise PayoffError(
            f"--resume continues a run with its own config; the one setting it takes is the "
            f"length to train to ({key}=N), got: {' '.join(given)}"
        )
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # total_steps=1e6
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PayoffError(f"{key} must be a whole number >= 1, got {value!r}")
    return key, value


def _add_train(sub: argparse._SubParsersAction) -> None:
    """The `train` command: a recipe, algorithm or YAML file and its overrides, or --resume RUN."""
    p = sub.add_parser(
        "train",
        help="train a recipe or an algorithm (or resume a run)",
        description="Train a shipped recipe, an algorithm from its defaults, or a YAML file "
        "into a new run directory. A name is looked up as a file first, then as a recipe, "
        "then as an algorithm (ppo, dqn, sac, sft, dpo, grpo, ...: `payoff recipes` lists "
        "them); an algorithm's run is titled by it and its env or task ('ppo on Acrobot-v1').",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  payoff train cartpole-ppo                        a shipped recipe\n"
            "  payoff train cartpole-ppo total_steps=2e5 --seed 3\n"
            "  payoff train my-recipe.yaml                      a YAML file (a run's config.yaml too)\n"
            "  payoff train ppo env.id=Acrobot-v1               an algorithm, from its defaults\n"
            "  payoff train sft task.data=rows.jsonl            its defaults on your data\n"
            "  payoff train dqn-ablation                        an experiment: several runs, compared\n"
            "  payoff train --resume runs/RUN                   continue a stopped run\n"
            "  payoff train --resume runs/RUN total_steps=1e6   train a finished run further"
        ),
    )
    p.add_argument(
        "recipe",
        nargs="?",
        help="recipe name (see `payoff recipes`), algorithm name (its defaults: ppo, sft, "
        "...) or path to a YAML file",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        help="config overrides key=value (dotted for nesting: env.id=CartPole-v1)",
    )
    p.add_argument("--seed", type=int, default=None, help="random seed (same seed, same metrics)")
    p.add_argument("--out", default="runs", help="folder for run directories (default: runs/)")
    p.add_argument("--resume", metavar="RUN", help="continue RUN from its latest checkpoint")
    p.add_argument(
        "--no-media", action="store_true", help="skip pictures, GIF and report at the end"
    )
    p.add_argument(
        "--track",
        metavar="LOGGERS",
        default=None,
        help="metric loggers, comma-separated: tensorboard, wandb, mlflow or none "
        "(default: $PAYOFF_LOGGERS, else tensorboard; see docs/tracking.md)",
    )
    _add_trust_code(p)
    p.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    # from the module by name: `payoff.train` is also the package's front-door function
    from payoff.train import finished_step, refuse_experiment, resume, train

    if args.resume:
        if args.seed is not None or args.out != "runs":
            raise PayoffError(
                "--resume continues a run in its own folder with its own seed; pass no --seed "
                "or --out with it"
            )
        from payoff.track.run import Run

        run_dir = Run.open(args.resume)
        refuse_experiment(run_dir, "resume")
        key, total = _resume_length(run_dir, args.recipe, args.overrides)
        step = finished_step(run_dir)
        if step is not None and total is None:
            print(
                f"run {args.resume} already finished at step {step}; nothing to resume "
                f"(to train it further: payoff train --resume {args.resume} {key}=N)"
            )
            return 0
        with _writing(
            f"run {args.resume!r}",
            "--resume continues a run in place, so the run must be writable "
            "(copy it somewhere writable and resume the copy)",
        ):
            run = resume(args.resume, media=not args.no_media, loggers=args.track, total=total)
    else:
        if not args.recipe:
            raise PayoffError(
                "name a recipe (see `payoff recipes`), an algorithm (payoff train ppo "
                "env.id=Acrobot-v1) or a YAML file, or pass --resume RUN"
            )
        run = train(
            args.recipe,
            args.overrides,
            seed=args.seed,
            out=args.out,
            media=not args.no_media,
            loggers=args.track,
        )
    if finished_step(run) is None:
        from payoff.track.interrupt import exit_status

        if run.checkpoint_path().exists():
            print(
                f"stopped early; checkpoint saved. Continue with: payoff train --resume {run.path}"
            )
        else:
            print(
                f"stopped early; the experiment's member runs so far are in {run.path / 'members'} "
                "(continue an unfinished one with: payoff train --resume MEMBER)"
            )
        return exit_status()
    summary = run.summary()  # (a resumed run's summary came with its folder: anyone's)
    final = summary.get("final_eval")
    if summary.get("final_line"):  # algorithms with their own evaluation (language models)
        line = _printable(summary["final_line"])  # ("no final evaluation (...)" as it is)
        print(line if line.startswith("no final evaluation") else f"final evaluation: {line}")
    elif final:
        from payoff.rollout.evaluate import EvalResult

        print(f"final evaluation: {_printable(EvalResult(**final).line())}")
    if summary.get("plateau_note"):
        print(_printable(summary["plateau_note"]))
    for line in summary.get("member_finals") or []:  # an experiment: each member's result
        print(_printable(line))
    print(f"run: {run.path}")
    report = run.media / "report.html"
    if report.exists():
        print(f"report: {report}")
    return 0


def _printable(text: object) -> str:
    """Text from a run's files without control characters: escape sequences in a copied
    run's summary could retitle the terminal, clear it or write the clipboard."""
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in str(text))


def _add_eval(sub: argparse._SubParsersAction) -> None:
    """The `eval` command: a run and how to evaluate it."""
    p = sub.add_parser(
        "eval", help="evaluate a trained run", description="Evaluate a run's latest policy."
    )
    p.add_argument("run", help="run directory")
    p.add_argument("--episodes", type=int, default=100, help="evaluation episodes (default 100)")
    p.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    p.add_argument(
        "--split",
        default=None,
        help="what to evaluate on: a language-model run's dataset split (test|ood), a kart "
        "run's track (heldout)",
    )
    p.add_argument(
        "--k", default=None, help="comma-separated k for pass@k (language-model runs), e.g. 1,8"
    )
    p.add_argument(
        "--stochastic",
        action="store_true",
        help="sample actions as in training instead of taking the most likely one (agents)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the evaluation's seed (agents: episode k is seeded seed + k; default: the run's "
        "seed + 1,000,000)",
    )
    p.add_argument(
        "--opponent",
        default=None,
        help="self-play runs: the baseline to play, e.g. alphabeta-5 (default: the recipe's "
        "strongest baseline)",
    )
    _add_trust_code(p)
    p.set_defaults(func=_cmd_eval)


def _cmd_eval(args: argparse.Namespace) -> int:
    from payoff.train import load

    _positive("--episodes", args.episodes)
    _, algorithm = load(args.run)
    options: dict[str, Any] = {}
    if args.split is not None:
        options["split"] = args.split
    if args.stochastic:
        options["deterministic"] = False
    if args.seed is not None:
        if args.seed < 0:
            raise ConfigError(
                f"--seed must be >= 0 (episode k is seeded seed + k), got {args.seed}"
            )
        options["seed"] = args.seed
    if args.opponent is not None:
        options["opponent"] = args.opponent
    if args.k is not None:
        parts = [part.strip() for part in args.k.split(",")]
        if not all(part.isdigit() and int(part) > 0 for part in parts):
            raise ConfigError(
                f"--k must be positive integers separated by commas (e.g. 1,8), got {args.k!r}"
            )
        options["k"] = [int(part) for part in parts]
    # Each kind has its own evaluate: agents -> episode statistics (EvalResult), language
    # models -> accuracy and pass@k (LMEvalResult), others their own (reward models: pairs).
    evaluate = getattr(algorithm, "evaluate", None)
    if evaluate is None:
        raise ConfigError(f"{args.run!r} is a {algorithm.name} run, which has no evaluation")
    accepted = inspect.signature(evaluate).parameters
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    flags = {
        "split": "--split",
        "k": "--k",
        "deterministic": "--stochastic",
        "seed": "--seed",
        "opponent": "--opponent",
    }
    for name in options:
        if name not in accepted and not open_ended:
            raise ConfigError(
                f"{flags[name]} does not apply to {algorithm.name} runs such as {args.run!r}: "
                f"--split applies to language-model runs (test|ood) and kart runs (heldout), "
                f"--k to language-model runs, --stochastic to agents whose policy samples, "
                f"--opponent to self-play runs (alphazero)"
            )
    result = evaluate(args.episodes, **options) if options else evaluate(args.episodes)
    if isinstance(result, dict):  # metrics by name (agent_grpo)
        data, line = result, ", ".join(f"{k} {v:.3f}" for k, v in result.items())
    else:
        data, line = result.to_dict(), result.line()
        env = getattr(getattr(algorithm.config, "env", None), "id", None)
        if env and hasattr(result, "episode_returns"):  # the checkpoint's env, not config.yaml's
            tracks = f", its {_printable(args.split)} tracks" if args.split is not None else ""
            line = f"{_printable(env)} (the env in the checkpoint's config{tracks}): {line}"
        for key in ("episode_returns", "episode_lengths"):  # each episode's, for scripts
            if getattr(result, key, None):
                data[key] = list(getattr(result, key))
    print(json.dumps(data) if args.json else line)
    return 0


def _add_play(sub: argparse._SubParsersAction) -> None:
    """The `play` command: a run's episodes to a GIF, or a board game in the terminal."""
    p = sub.add_parser(
        "play",
        help="render episodes to a GIF",
        description="Render episodes of a trained policy to a GIF.",
    )
    p.add_argument("run", help="run directory")
    p.add_argument("--gif", help="output GIF path")
    p.add_argument(
        "--human", action="store_true", help="play against a board-game run in the terminal"
    )
    p.add_argument("--second", action="store_true", help="with --human: the agent moves first")
    p.add_argument("--episodes", type=int, default=1, help="episodes to render (default 1)")
    _add_trust_code(p)
    p.set_defaults(func=_cmd_play)


def _cmd_play(args: argparse.Namespace) -> int:
    if args.human:
        from payoff.play import play_run

        play_run(args.run, human_first=not args.second)
        return 0
    from payoff.algos.agent import Agent
    from payoff.train import load

    _, algorithm = load(args.run)
    if not args.gif:
        raise PayoffError("pass --gif PATH to render episodes, or --human to play a board-game run")
    if not isinstance(algorithm, Agent):
        raise PayoffError(
            f"--gif renders an agent's episodes in its environment; {args.run!r} is a "
            f"{algorithm.name} run, which has no rendered episodes (evaluate it with: payoff eval "
            f"{args.run})"
        )
    _positive("--episodes", args.episodes)
    with _writing(f"the GIF {args.gif!r}", "pass --gif with a path you can write to"):
        path = algorithm.record_gif(args.gif, episodes=args.episodes)
    print(f"wrote {path}")
    return 0


def _add_plot(sub: argparse._SubParsersAction) -> None:
    """The `plot` command: runs' learning curves overlaid in one image."""
    p = sub.add_parser(
        "plot",
        help="overlay learning curves",
        description=(
            "Overlay learning curves of runs; runs of the same recipe with different seeds are drawn as a mean with a band."
        ),
    )
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument(
        "--out",
        default="curves.png",
        help="output image, its format by the extension: .png, .svg, .pdf, .jpg (default curves.png)",
    )
    p.add_argument(
        "--metric",
        action="append",
        help="metric to plot (repeatable); default: the headline metric",
    )
    p.add_argument("--x", default="step", help="x axis key (default step)")
    p.set_defaults(func=_cmd_plot)


def _cmd_plot(args: argparse.Namespace) -> int:
    from payoff.report.plots import (
        default_metrics,
        figure_format,
        final_point,
        plot_curves,
        series,
    )
    from payoff.track.run import Run

    figure_format(args.out)  # before reading the runs: --out x.svg writes SVG, x.txt is refused
    runs = []
    for path in args.runs:
        run = Run.open(path)
        members = run.path / "members"
        if run.config.get("kind") == "experiment":  # its curves are its member runs'
            found = sorted(members.iterdir()) if members.is_dir() else []
            runs += [Run.open(m) for m in found if (m / "config.yaml").is_file()]
        else:
            runs.append(run)
    if not runs:
        raise RunError(f"{' '.join(args.runs)}: an experiment with no member runs yet")
    logged = {key for run in runs for record in run.records() for key in record}
    for key in [*(args.metric or []), args.x]:
        if key not in logged:
            raise ConfigError(
                f"no run logged {key!r}.{suggest(key, sorted(logged))} Logged: "
                f"{', '.join(sorted(logged)[:30]) or 'nothing yet'}"
            )
    with _writing(f"the plot {args.out!r}", "pass --out with a path you can write to"):
        path = plot_curves(runs, args.out, metrics=args.metric or None, x=args.x)
    print(f"wrote {path}")
    drawn = args.metric or default_metrics(runs)
    left_out = [
        run.path.name
        for run in runs
        if not any(len(series(run, m, args.x)[0]) or final_point(run, m, args.x) for m in drawn)
    ]
    if left_out:  # the title counts them, the legend cannot
        print(
            f"note: {', '.join(left_out)} logged none of {', '.join(drawn)}, so the plot has "
            f"no line for {'it' if len(left_out) == 1 else 'them'} (--metric picks another)",
            file=sys.stderr,
        )
    envs = sorted({_trained_on(run.config) for run in runs})
    if len(envs) > 1:  # a return of -600 on Taxi and of -0.1 on Blackjack share an axis
        print(
            f"note: these runs train on different envs or tasks ({', '.join(envs)}): their "
            f"curves are on one axis but not on one scale",
            file=sys.stderr,
        )
    return 0


def _trained_on(config: dict) -> str:
    """The env id, task name or game a run's config trains on ('?' where it names none)."""
    for key, field_name in (("env", "id"), ("task", "name"), ("game", "name")):
        value = config.get(key)
        if isinstance(value, dict) and value.get(field_name):
            return _printable(value[field_name])
        if isinstance(value, str) and value:
            return _printable(value)
    return "?"


def _add_report(sub: argparse._SubParsersAction) -> None:
    """The `report` command: a run's HTML report."""
    p = sub.add_parser(
        "report", help="write a run's HTML report", description="Write RUN/media/report.html."
    )
    p.add_argument("run", help="run directory")
    _add_trust_code(p)
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from payoff.report.page import write_report
    from payoff.track.run import Run
    from payoff.train import load, write_media

    writing = functools.partial(  # a fresh context manager for each use
        _writing,
        f"the report of {args.run!r}",
        "the report is written into the run's media/ folder, so the run must be writable "
        "(copy it somewhere writable and report the copy)",
    )
    with writing():
        run = Run.open(args.run)  # makes media/ when it is missing
    algorithm = None
    if run.config.get("kind") != "experiment" and run.checkpoint_path().exists():
        try:
            _, algorithm = load(args.run)
        except (CheckpointError, ConfigError, DataError, EnvError) as err:
            # the metrics still tell the story: report them (a refused checkpoint, a dataset
            # or env that is gone or changed since, code the run names that is not importable
            # from here or not trusted: a report reads no training data)
            print(f"payoff: {err}; the report shows the metrics only", file=sys.stderr)
    with writing():
        if algorithm is not None:
            write_media(run, algorithm)
            path = run.media / "report.html"
        else:
            path = write_report(run)
    print(f"wrote {path}")
    return 0


def _add_redteam(sub: argparse._SubParsersAction) -> None:
    """The `redteam` command: a red-team spec and its overrides."""
    p = sub.add_parser(
        "redteam",
        help="attack a reward before training on it",
        description=(
            "Train a small aggressive optimizer against a proxy reward and report episodes where the proxy is high "
            "and the true objective fails, with evidence. SPEC: a shipped spec (boatrace, boatrace-progress, "
            "cleaning) or a YAML file."
        ),
    )
    p.add_argument("spec", help="red-team spec name or YAML path")
    p.add_argument("overrides", nargs="*", help="spec overrides key=value (e.g. budget=50000)")
    p.add_argument("--out", default="runs", help="folder for the run directory (default: runs/)")
    p.set_defaults(func=_cmd_redteam)


def _cmd_redteam(args: argparse.Namespace) -> int:
    from payoff.redteam import redteam

    run = redteam(args.spec, args.overrides, out=args.out)
    summary = run.summary()
    print(summary["headline"])
    for finding in summary.get("findings", [])[:3]:
        print(
            f"  episode {finding['episode']}: proxy {finding['proxy_return']:.3g}, true {finding['true_return']:.3g}, "
            f"state concentration {finding['state_concentration']}, loop {finding['loop']}"
        )
    print(f"run: {run.path}\nreport: {run.media / 'report.html'}")
    return 0


def _version() -> str:
    """The installed package's version (importlib.metadata), else the source tree's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("payoff")
    except PackageNotFoundError:  # running from a source tree that was never installed
        import payoff

        return str(getattr(payoff, "__version__", "unknown"))


def _add_trust_code(parser: argparse.ArgumentParser) -> None:
    """--trust-code for the commands that load a run (see payoff.core.imports)."""
    parser.add_argument(
        "--trust-code",
        action="store_true",
        help="import the code a loaded run names (env entry point, wrappers, reward modules) "
        "though payoff did not write the run on this machine for you",
    )


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command, in the order `payoff --help` lists them."""
    parser = argparse.ArgumentParser(
        prog="payoff", description="Reinforcement learning by trial and error, end to end."
    )
    parser.add_argument("--version", action="version", version=f"payoff {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in (
        _add_recipes,
        _add_train,
        _add_eval,
        _add_play,
        _add_plot,
        _add_report,
        _add_redteam,
    ):
        add(sub)
    return parser


def _close_flag(parser: argparse.ArgumentParser, command: str | None, flag: str) -> str:
    """' Did you mean ...?' naming the command's own flags close to `flag`, or ''."""
    import difflib

    options = list(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            options += list(action.choices[command]._option_string_actions)
    name = flag.partition("=")[0]
    matches = difflib.get_close_matches(name, [o for o in options if o.startswith("--")], 2, 0.75)
    return f" Did you mean {' or '.join(matches)}?" if matches else ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; `key=value` overrides may follow the flags as well as precede them.

    argparse ends a positional list at the first flag, so `--seed 1 total_steps=5` leaves
    `total_steps=5` unrecognized; those tokens are appended to the overrides, in their order.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    flags = [token for token in extra if token.startswith("-")]
    close = _close_flag(parser, getattr(args, "command", None), flags[0]) if flags else ""
    if close:  # --seeed 3: a mistyped flag, not a config key
        parser.error(f"unrecognized arguments: {' '.join(flags)}.{close}")
    if flags and hasattr(args, "overrides"):  # --device cuda: config keys are key=value
        key, _, value = flags[0].lstrip("-").partition("=")
        following = extra[extra.index(flags[0]) + 1 :][:1]
        value = value or next((t for t in following if not t.startswith("-")), "VALUE")
        key = key.replace("-", "_")
        # another library's name (--max_steps): payoff's first, as the config would say
        library, ours = OTHER_LIBRARIES.get(key, ("", {}))
        renamed = next((name for name in ours if name), "")
        said = f"{renamed}={value} ({library}'s {key} is payoff's {renamed})" if renamed else ""
        parser.error(
            f"unrecognized arguments: {' '.join(flags)} (config keys are set as key=value: "
            f"{said or f'{key}={value}'}; the flags are in --help)"
        )
    if flags or (extra and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(flags or extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        with trusting_loaded_code() if getattr(args, "trust_code", False) else nullcontext():
            return int(args.func(args) or 0)
    except PayoffError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a file that cannot be read or written: one line, no traceback
        print(f"error: {_os_reason(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C (or SIGTERM, SIGHUP) stops at once
        from payoff.track.interrupt import exit_status

        print("interrupted", file=sys.stderr)
        return exit_status()


if __name__ == "__main__":
    sys.exit(main())
