"""AlphaZero-lite: self-play learning, exact resume, PettingZoo observations, human play."""

from __future__ import annotations

import numpy as np
import pytest

from payoff.algos.alphazero import AlphaZero
from payoff.core.errors import ConfigError, EnvError
from payoff.envs.games.arena import play_match
from payoff.envs.games.players import make_player
from payoff.play import play_human
from payoff.rollout.selfplay import SelfPlayPool

TINY = dict(
    game="tictactoe",
    games_per_iteration=8,
    train_steps=5,
    batch_size=32,
    gate_games=2,
    gate_simulations=4,
    eval_every=1,
    eval_games=2,
    eval_simulations=4,
    baselines=["random", "greedy"],
    final_eval_games=2,
    mcts={"simulations": 8},
)


def _losses_to_random(agent: AlphaZero, simulations: int = 16) -> tuple[int, int]:
    """(losses, losses moving first) over 200 games against the random player."""
    losses = first = 0
    for seed in (1, 2):
        result = play_match(
            agent.game,
            agent.player(simulations=simulations, seed=seed),
            make_player("random", agent.game, 10 + seed),
            100,
        )
        losses, first = losses + result.losses, first + result.losses_first
    return losses, first


@pytest.mark.slow
def test_tictactoe_self_play_stops_losing_to_random() -> None:
    """Measured (seed 0): an untrained net with 16 simulations loses 32 of 200 games to
    random play; after 8 iterations of 32 self-play games it lost 4, none moving first."""
    agent = AlphaZero(
        game="tictactoe",
        seed=0,
        iterations=8,
        games_per_iteration=32,
        train_steps=50,
        gate_games=0,
        temperature_moves=2,
        eval_every=100,
        eval_games=0,
        baselines=["random"],
        final_eval_games=0,
    )
    before, _ = _losses_to_random(agent)
    agent.learn()
    after, after_first = _losses_to_random(agent)
    assert before >= 20
    assert after <= 10 and after_first <= 1
    value_losses = [h["train/value_loss"] for h in agent.history if "train/value_loss" in h]
    assert value_losses[-1] < value_losses[0]


def _comparable(history: list[dict]) -> list[dict]:
    """Records without timings, and without the end-of-run matches (learn(2) ends a run too)."""
    return [
        {k: v for k, v in h.items() if not k.startswith("perf/")}
        for h in history
        if not any(k.startswith("final/") for k in h)
    ]


def test_resume_is_exact() -> None:
    straight = AlphaZero(iterations=3, **TINY).learn()
    first = AlphaZero(iterations=3, **TINY)
    first.learn(2)
    resumed = AlphaZero(iterations=3, **TINY)
    resumed.load_state_dict(first.state_dict())
    resumed.learn()
    assert _comparable(first.history + resumed.history) == _comparable(straight.history)
    assert [r.__dict__ for r in resumed.results] == [r.__dict__ for r in straight.results]
    assert [it for it, _, _ in straight.elo_curve] == [0, 1, 2, 3]  # iteration 0: untrained


def test_predict_takes_pettingzoo_observations() -> None:
    pettingzoo = pytest.importorskip("pettingzoo")
    agent = AlphaZero(**TINY)
    env = pettingzoo.make("aec", "classic/tictactoe-v3")
    env.reset(seed=0)
    for move in (0, 4, 1):  # X threatens the first column; O must block at 2
        env.step(move)
    observation, *_ = env.last()
    agent.config.eval_simulations = 200
    move, state = agent.predict(observation)
    assert move == 2 and state is None and agent.act(observation) == 2
    with pytest.raises(EnvError, match="action_mask"):
        agent.predict({"observation": observation["observation"]})
    with pytest.raises(EnvError, match="action_mask"):
        agent.predict(observation["observation"])


def test_play_human_reprompts_on_bad_moves() -> None:
    agent = AlphaZero(**TINY)
    typed = iter(["hello", "9", "0", "0", "q"])
    said: list[str] = []
    result = play_human(agent, human_first=True, read=lambda _: next(typed), write=said.append)
    text = "\n".join(said)
    assert "'hello' is not a move" in text
    assert "cell 9 does not exist (cells are 0-8)" in text and "legal moves" in text
    assert "cell 0 is not free" in text  # the second 0: that cell is already taken
    assert result == -1.0 and "You resign." in text


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown game 'chess'"):
        AlphaZero(game="chess")
    with pytest.raises(ConfigError, match="alphabeta-<depth>"):
        AlphaZero(**{**TINY, "baselines": ["alphabeta"]})
    with pytest.raises(ConfigError, match="batch_size"):
        AlphaZero(batch_size=512, replay_size=100)
    with pytest.raises(ConfigError, match="'learning_rate_end' must be >= 0"):
        AlphaZero(**{**TINY, "learning_rate_end": -1e-3})
    with pytest.raises(ConfigError, match="'league_simulations' must be >= 1"):
        AlphaZero(**{**TINY, "league_simulations": 0})
    with pytest.raises(ConfigError, match="'search_value_weight' must be in \\[0, 1\\]"):
        AlphaZero(**{**TINY, "search_value_weight": 1.5})


def test_learning_rate_decays_linearly_to_its_end() -> None:
    agent = AlphaZero(iterations=3, learning_rate=1e-3, learning_rate_end=1e-4, **TINY).learn()
    rates = [h["train/learning_rate"] for h in agent.history if "train/learning_rate" in h]
    assert rates == pytest.approx([1e-3, 5.5e-4, 1e-4])
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4)
    constant = AlphaZero(iterations=2, learning_rate=1e-3, **TINY).learn()
    assert [h["train/learning_rate"] for h in constant.history if "train/learning_rate" in h] == [
        1e-3,
        1e-3,
    ]


def test_replay_keeps_symmetries_and_outcomes() -> None:
    agent = AlphaZero(iterations=1, **TINY)
    agent.learn()
    n = agent.replay.size
    assert n % 8 == 0  # every tic-tac-toe position is stored with its 8 symmetries
    values = agent.replay.values[:n]
    assert set(np.unique(values)) <= {-1.0, 0.0, 1.0}
    np.testing.assert_allclose(agent.replay.policies[:n].sum(axis=1), 1.0, atol=1e-5)


def test_league_and_final_matches_search_with_their_own_simulations(monkeypatch) -> None:
    played: list[tuple[str, int]] = []  # (network player's name, its simulations per move)
    original = SelfPlayPool.play_matches

    def recording(self, matches):
        for match in matches:
            played.extend(
                (p.name, p.simulations) for p in (match.a, match.b) if p.weights is not None
            )
        return original(self, matches)

    monkeypatch.setattr(SelfPlayPool, "play_matches", recording)
    AlphaZero(iterations=1, **{**TINY, "eval_simulations": 5, "league_simulations": 3}).learn()
    league = {sims for name, sims in played if name.startswith("iter-")}
    final = {sims for name, sims in played if name.startswith("gen-")}
    assert league == {3} and final == {5}
    # eval_symmetries reaches the league's and the final matches' network players
    played.clear()
    monkeypatch.setattr(
        SelfPlayPool,
        "play_matches",
        lambda self, matches: (
            played.extend(
                (p.name, p.symmetries) for m in matches for p in (m.a, m.b) if p.weights is not None
            )
            or original(self, matches)
        ),
    )
    AlphaZero(iterations=1, **{**TINY, "eval_symmetries": True}).learn()
    assert played and all(symmetric for _, symmetric in played)


def test_value_targets_mix_outcome_and_search_value() -> None:
    """search_value_weight w stores (1 - w) * z + w * q: same games, so q = 2 * mixed - z."""
    outcome = AlphaZero(iterations=1, **TINY).learn()
    mixed = AlphaZero(iterations=1, search_value_weight=0.5, **TINY).learn()
    n = outcome.replay.size
    assert mixed.replay.size == n  # the same self-play games (the weight acts after them)
    z, m = outcome.replay.values[:n], mixed.replay.values[:n]
    q = 2 * m - z
    assert (np.abs(q) <= 1 + 1e-6).all()  # a search value, in [-1, 1]
    assert not set(np.unique(m)) <= {-1.0, 0.0, 1.0}  # no longer only game results
    # A position and its symmetries share one search, hence one target.
    assert (m.reshape(-1, 8) == m[::8, None]).all()


@pytest.mark.parametrize(
    "recipe", ["tictactoe-alphazero", "connect4-alphazero", "simple-spread-ippo"]
)
def test_recipes_resolve(recipe: str) -> None:
    from payoff.train import resolve

    cls, config, resolved = resolve(recipe)
    assert resolved["algo"] == cls.name and resolved["description"]


def test_cli_play_human(tmp_path, monkeypatch, capsys) -> None:
    """`payoff play RUN --human` on a (barely) trained run; illegal moves are re-asked."""
    from payoff.cli import main

    overrides = [f"{k}={v}" for k, v in TINY.items() if k not in ("mcts", "baselines", "game")]
    overrides += ["iterations=1", "mcts.simulations=8", "baselines=[random]"]
    assert (
        main(["train", "tictactoe-alphazero", *overrides, "--out", str(tmp_path), "--no-media"])
        == 0
    )
    run = next(tmp_path.iterdir())
    # the final line names the opponent and the record, not a "mean return"
    assert "final evaluation: vs random " in capsys.readouterr().out
    typed = iter(["4", "4", "q"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(typed))
    assert main(["play", str(run), "--human", "--second"]) == 0
    out = capsys.readouterr().out
    assert "You play O (second)" in out and "legal moves" in out and "You resign." in out


@pytest.mark.parametrize("game_name, kind", [("connect4", "resnet"), ("tictactoe", "mlp")])
def test_colour_plane_tells_the_network_who_moved_first(game_name: str, kind: str) -> None:
    import torch

    from payoff.envs.games import make_game
    from payoff.models.game_nets import GameNetConfig, PolicyValueNet

    game = make_game(game_name)
    net = PolicyValueNet(game.shape, game.num_actions, GameNetConfig(kind=kind, colour_plane=True))
    seen: list[torch.Tensor] = []
    first_layer = next(
        m for m in net.trunk.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)
    )
    first_layer.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    start = game.initial_state()
    after_one = game.play(start, int(np.flatnonzero(game.legal_mask(start))[0]))
    logits, values = net(torch.from_numpy(np.stack([game.encode(start), game.encode(after_one)])))
    assert logits.shape == (2, game.num_actions) and values.shape == (2,)
    colour = seen[0].reshape(2, 3, -1)[:, 2]  # conv input [2, 3, H, W] or the flat mlp input
    assert (colour[0] == 1).all() and (colour[1] == 0).all()  # first player to move, then not


def test_threat_planes_mark_each_sides_winning_cells_from_the_games_lines() -> None:
    """Connect Four, played out: X (first) has three on the bottom row with the fourth cell
    empty, O three above it; each side's plane marks its own completing cell, only while it
    is empty, and the parity plane marks rows 1, 3 and 5 from the bottom."""
    import torch

    from payoff.envs.games import make_game
    from payoff.models.game_nets import GameNetConfig, PolicyValueNet

    game = make_game("connect4")
    assert game.lines.shape == (69, 4) and make_game("tictactoe").lines.shape == (8, 3)
    config = GameNetConfig(colour_plane=True, threat_planes=True)
    net = PolicyValueNet(game.shape, game.num_actions, config, game.lines)
    state = game.initial_state()
    for column in (0, 0, 1, 1, 2, 2):  # X on the bottom row, O on the row above
        state = game.play(state, column)
    planes = torch.from_numpy(game.encode(state)[None])  # X to move: plane 0 is X's
    threats = net.threats(planes)[0]
    assert threats[0].nonzero().tolist() == [[5, 3]]  # X wins at the bottom of column 3
    assert threats[1].nonzero().tolist() == [[4, 3]]  # O's cell, one above
    assert threats[2][:, 0].tolist() == [0, 1, 0, 1, 0, 1]  # rows 5, 3, 1 from the top
    won = game.play(state, 3)  # X plays there; O to move, so X's plane is now the second
    after = net.threats(torch.from_numpy(game.encode(won)[None]))[0]
    assert after[1].nonzero().tolist() == [[5, 4]]  # (5, 3) is taken; 1-4 is X's next line
    assert after[0].nonzero().tolist() == [[4, 3]]
    logits, values = net(planes)
    assert logits.shape == (1, 7) and values.shape == (1,)
    assert "lines" not in net.state_dict()  # the game gives them again
    with pytest.raises(ConfigError, match="threat_planes needs the game's lines"):
        PolicyValueNet(game.shape, game.num_actions, config)


@pytest.mark.parametrize("workers", [1, 2])
def test_selfplay_openings_start_games_off_the_searched_lines(workers: int) -> None:
    """selfplay_openings k: each game's first stored position has 0..k stones, not always 0;
    the random plies are not stored, so there are fewer positions than from the empty board."""
    config = {**TINY, "games_per_iteration": 24, "gate_games": 0, "eval_games": 0}
    config.update(final_eval_games=0, workers=workers)
    plain = AlphaZero(iterations=1, **config).learn()
    opened = AlphaZero(iterations=1, selfplay_openings=3, **config).learn()
    assert opened.history[-1]["selfplay/games"] == 24

    def first_stones(agent: AlphaZero) -> list[int]:
        n = agent.replay.size
        planes = agent.replay.planes[:n:8]  # one of each position's 8 symmetries
        stones = planes[:, :2].sum(axis=(1, 2, 3)).astype(int)
        # a game's first stored position is where the stone count does not grow by one
        return [int(s) for i, s in enumerate(stones) if i == 0 or s != stones[i - 1] + 1]

    assert set(first_stones(plain)) == {0}
    starts = first_stones(opened)
    assert len(starts) == 24 and set(starts) <= {0, 1, 2, 3} and len(set(starts)) >= 3
    assert opened.replay.size < plain.replay.size
    with pytest.raises(ConfigError, match="selfplay_openings"):
        AlphaZero(iterations=1, selfplay_openings=-1, **config)


def test_evaluate_plays_from_the_final_evaluations_openings(monkeypatch) -> None:
    import payoff.algos.alphazero as module

    seen: list[tuple[int, int]] = []

    def recording(game, a, b, games, openings=0, seed=0):
        result = play_match(game, a, b, games, openings, seed)
        seen.append((openings, result.distinct))
        return result

    agent = AlphaZero(iterations=1, **{**TINY, "final_eval_openings": 2})
    monkeypatch.setattr(module, "play_match", recording)
    result = agent.evaluate(episodes=8, seed=3)
    assert result.episodes == 8
    assert seen[0][0] == 2 and seen[0][1] >= 4  # 4 distinct 2-ply openings, both colours


def _mirror_state(game, state):
    """Connect Four's position with its columns reversed (same player to move)."""
    import dataclasses

    board = state.board.reshape(game.shape)[:, ::-1].reshape(-1).copy()
    return dataclasses.replace(state, board=board)


def test_symmetric_evaluation_averages_the_board_and_its_mirror() -> None:
    """eval_symmetries' evaluator: the mean of the plain evaluator's priors (mapped back to
    the position's columns) and values over a position and its mirror image, so a position
    and its mirror get mirrored priors and equal values, which the plain network does not."""
    import torch

    from payoff.envs.games import make_game
    from payoff.models.game_nets import GameNetConfig, PolicyValueNet
    from payoff.rollout.network_players import network_evaluator, symmetry_maps

    game = make_game("connect4")
    torch.manual_seed(0)
    net = PolicyValueNet(
        game.shape, game.num_actions, GameNetConfig(kind="resnet", channels=8, blocks=1)
    )
    net.eval()
    state = game.initial_state()
    for move in (3, 3, 4, 0, 6, 6, 6, 6, 6, 6):  # lopsided; column 6 full, column 0 not
        state = game.play(state, move)
    mirrored = _mirror_state(game, state)
    assert not game.legal_mask(state)[6] and game.legal_mask(mirrored)[6]
    plain, symmetric = network_evaluator(net, game), network_evaluator(net, game, True)
    priors, values = plain([state, mirrored])
    expected_priors = (priors[0] + priors[1][::-1]) / 2
    expected_value = (values[0] + values[1]) / 2
    assert not np.allclose(priors[0], priors[1][::-1], atol=1e-3)  # the plain net is lopsided
    sym_priors, sym_values = symmetric([state, mirrored])
    np.testing.assert_allclose(sym_priors[0], expected_priors, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sym_priors[1], expected_priors[::-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sym_values, [expected_value] * 2, rtol=1e-5, atol=1e-6)
    assert sym_priors[0][6] == 0 and abs(sym_priors[0].sum() - 1) < 1e-6  # still only legal moves
    # tic-tac-toe's 8 images, the identity first
    maps = symmetry_maps(make_game("tictactoe"))
    assert len(maps) == 8 and (maps[0][1] == np.arange(9)).all()
    assert len({tuple(actions) for _, actions in maps}) == 8
    # a game whose symmetries do not rearrange the board is refused by name
    from payoff.core.errors import ConfigError

    broken = make_game("connect4")
    broken.symmetries = lambda planes, policy: [(planes, policy), (planes * 0, policy)]
    with pytest.raises(ConfigError, match="connect4.*rearrangement"):
        symmetry_maps(broken)
    broken.symmetries = lambda planes, policy: [(planes[:, :, ::-1], policy[::-1])]
    with pytest.raises(ConfigError, match="the position itself first"):
        symmetry_maps(broken)


def test_eval_symmetries_reaches_the_play_time_players_but_not_the_gate(monkeypatch) -> None:
    import payoff.algos.alphazero as alphazero_module

    made: list[bool] = []
    original = alphazero_module.network_player

    def recording(*args, **kwargs):
        made.append(bool(args[7] if len(args) > 7 else kwargs.get("symmetries", False)))
        return original(*args, **kwargs)

    monkeypatch.setattr(alphazero_module, "network_player", recording)
    agent = AlphaZero(**{**TINY, "eval_symmetries": True})
    agent._gate()  # the candidate and the best: plain, as in self-play
    assert made == [False, False]
    agent.player()
    assert made[-1] is True
    assert agent.act(agent.game.initial_state()) in range(agent.game.num_actions)


def test_evaluate_says_who_it_played() -> None:
    # `payoff eval` on an AlphaZero run printed a mean return with no opponent
    result = AlphaZero(**TINY).evaluate(4)
    assert result.opponent == "greedy" and result.wins + result.draws + result.losses == 4
    assert result.line().startswith("against greedy: ") and result.to_dict()["opponent"] == "greedy"


def test_evaluate_plays_the_opponent_named(tmp_path, capsys) -> None:
    from payoff.cli import main
    from payoff.train import train

    agent = AlphaZero(**TINY)
    result = agent.evaluate(4, opponent="alphabeta-2")
    assert result.opponent == "alphabeta-2" and result.wins + result.draws + result.losses == 4
    with pytest.raises(ConfigError, match=r"unknown baseline player 'alphabeta'.*alphabeta-4"):
        agent.evaluate(2, opponent="alphabeta")
    # the CLI's --opponent, and its refusal for a run that plays no games
    overrides = [f"{k}={v}" for k, v in TINY.items() if k not in ("game", "mcts")]
    run = train("tictactoe-alphazero", [*overrides, "iterations=1"], out=tmp_path, media=False)
    capsys.readouterr()
    assert main(["eval", str(run.path), "--episodes", "2", "--opponent", "alphabeta-3"]) == 0
    assert capsys.readouterr().out.startswith("against alphabeta-3: ")
    frozen = train("frozenlake-q", ["total_episodes=50"], out=tmp_path, media=False)
    assert main(["eval", str(frozen.path), "--opponent", "alphabeta-3"]) == 2
    assert "--opponent does not apply to" in capsys.readouterr().err
