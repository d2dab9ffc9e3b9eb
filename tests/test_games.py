"""payoff's board games follow PettingZoo's classic envs move for move; baselines play right."""

from __future__ import annotations

import numpy as np
import pytest

from payoff.core.errors import ConfigError
from payoff.envs.games import IllegalMoveError, make_game
from payoff.envs.games.arena import play_match
from payoff.envs.games.base import GameState, state_from_planes
from payoff.envs.games.players import AlphaBetaPlayer, MinimaxPlayer, Player, make_player


def _pettingzoo_env(name: str):
    pettingzoo = pytest.importorskip("pettingzoo")  # the rules tests need the multiagent extra
    ids = {"tictactoe": "classic/tictactoe-v3", "connect4": "classic/connect_four-v3"}
    return pettingzoo.make("aec", ids[name])


@pytest.mark.parametrize("name,games", [("tictactoe", 150), ("connect4", 60)])
def test_random_games_match_pettingzoo(name: str, games: int) -> None:
    """Same moves -> same observations, masks, rewards and game ends as PettingZoo."""
    game = make_game(name)
    rng = np.random.default_rng(0)
    endings = {"win0": 0, "win1": 0, "draw": 0}
    for episode in range(games):
        env = _pettingzoo_env(name)
        env.reset(seed=episode)
        state = game.initial_state()
        while True:
            agent = env.agent_selection
            observation, _, terminated, truncated, _ = env.last()
            assert agent == env.possible_agents[state.to_play]
            if terminated or truncated:
                break
            np.testing.assert_array_equal(
                observation["observation"], game.encode(state).transpose(1, 2, 0)
            )
            np.testing.assert_array_equal(
                observation["action_mask"].astype(bool), game.legal_mask(state)
            )
            legal = np.flatnonzero(game.legal_mask(state))
            action = int(rng.choice(legal))
            env.step(action)
            state = game.play(state, action)
            done = all(env.terminations.values())
            assert done == (game.outcome(state) is not None)
        mover_reward = env.rewards[env.possible_agents[state.to_play]]
        assert game.outcome(state) == mover_reward
        endings["draw" if state.winner == -1 else f"win{state.winner}"] += 1
    assert endings["win0"] > 0 and endings["win1"] > 0


def test_tictactoe_draw_matches_pettingzoo() -> None:
    """A known drawn line ends in a draw in both implementations."""
    moves = [4, 0, 8, 2, 1, 7, 6, 3, 5]
    env, game = _pettingzoo_env("tictactoe"), make_game("tictactoe")
    env.reset(seed=0)
    state = game.initial_state()
    for move in moves:
        env.step(move)
        state = game.play(state, move)
    assert all(env.terminations.values()) and set(env.rewards.values()) == {0}
    assert state.winner == -1 and game.outcome(state) == 0.0


def test_connect4_vertical_win_and_column_fill() -> None:
    game = make_game("connect4")
    state = game.initial_state()
    for move in [0, 1, 0, 1, 0, 1]:
        state = game.play(state, move)
    assert game.outcome(state) is None
    state = game.play(state, 0)
    assert state.winner == 0 and game.outcome(state) == -1.0  # the player to move has lost
    full = game.initial_state()
    for move in [3, 3, 3, 3, 3, 3]:
        full = game.play(full, move)
    assert not game.legal_mask(full)[3]
    with pytest.raises(IllegalMoveError, match="column 3 is full"):
        game.play(full, 3)


def test_symmetries_keep_policy_with_stones() -> None:
    game = make_game("tictactoe")
    state = game.play(game.initial_state(), 0)  # top-left corner
    policy = np.zeros(9, dtype=np.float32)
    policy[0] = 1.0
    for planes, pi in game.symmetries(game.encode(state), policy):
        cell = int(np.argmax(pi))
        assert planes[1].ravel()[cell] == 1.0  # the opponent's stone moved with the policy mass
    connect4 = make_game("connect4")
    state = connect4.play(connect4.initial_state(), 0)
    pairs = connect4.symmetries(connect4.encode(state), np.eye(7, dtype=np.float32)[0])
    assert pairs[1][0][1, 5, 6] == 1.0 and pairs[1][1][6] == 1.0


def test_state_from_planes_round_trip() -> None:
    game = make_game("connect4")
    state = game.initial_state()
    for move in [3, 2, 3, 4, 1]:
        state = game.play(state, move)
    back = state_from_planes(game.encode(state).transpose(1, 2, 0), game.shape)
    assert back.to_play == state.to_play and np.array_equal(back.board, state.board)
    batch = game.encode_batch([state, game.initial_state()])
    np.testing.assert_array_equal(batch[0], game.encode(state))
    np.testing.assert_array_equal(batch[1], game.encode(game.initial_state()))


def test_baselines() -> None:
    game = make_game("tictactoe")
    minimax = MinimaxPlayer(game, seed=1)
    assert minimax.value(game.initial_state()) == 0.0  # tic-tac-toe is a draw
    result = play_match(game, minimax, make_player("random", game, seed=2), 40)
    assert result.losses == 0 and result.wins > 30
    assert play_match(game, minimax, MinimaxPlayer(game, seed=3), 20).draws == 20
    connect4 = make_game("connect4")
    strong = AlphaBetaPlayer(connect4, depth=4, seed=1)
    assert play_match(connect4, strong, make_player("random", connect4, seed=2), 6).wins == 6
    with pytest.raises(ConfigError, match="alphabeta-<depth>"):
        make_player("alphabeta", connect4)
    with pytest.raises(ConfigError, match="Known games"):
        make_game("chess")


class _LowestColumn(Player):
    """Deterministic: always the lowest legal action."""

    name = "lowest"

    def __init__(self, game):
        self.game = game

    def act(self, states):
        return [int(np.flatnonzero(self.game.legal_mask(s))[0]) for s in states]


def test_random_openings_make_a_match_of_deterministic_players_distinct() -> None:
    game = make_game("connect4")
    player = _LowestColumn(game)
    # From the empty board the same policy on both sides plays one game ten times.
    assert play_match(game, player, player, 10).distinct == 1
    # Each pair of games shares its opening (here both games of a pair are the same line,
    # since A and B are one policy), and the pairs' openings differ.
    result = play_match(game, player, player, 10, openings=3, seed=4)
    assert result.distinct == 5 and result.games == 10
    again = play_match(game, player, player, 10, openings=3, seed=4)
    assert (again.wins, again.losses, again.lengths) == (result.wins, result.losses, result.lengths)
    assert "5 distinct games" in result.line()
    # Only 7 one-ply openings exist: asking for more pairs repeats some rather than failing.
    assert play_match(game, player, player, 20, openings=1, seed=0).distinct == 7
    with pytest.raises(ConfigError, match="openings 9: no 9 random plies"):
        play_match(make_game("tictactoe"), player, player, 2, openings=9)


@pytest.mark.parametrize("name", ["tictactoe", "connect4"])
def test_ending_moves_are_the_moves_that_end_the_game(name: str) -> None:
    # Checked against playing every legal move, in every position of random games (wins,
    # draws by a full board, and positions where no move ends the game).
    game = make_game(name)
    rng = np.random.default_rng(0)
    seen_win = seen_draw = seen_none = False
    for _ in range(300):
        state = game.initial_state()
        while state.winner is None:
            legal = np.flatnonzero(game.legal_mask(state))
            assert [a for a, _ in game.landing_cells(state)] == legal.tolist()
            ending = [a for a in legal if game.play(state, int(a)).winner is not None]
            assert game.ending_moves(state) == ending
            results = {game.play(state, int(a)).winner for a in ending}
            seen_win |= state.to_play in results
            seen_draw |= -1 in results
            seen_none |= not ending
            state = game.play(state, int(rng.choice(legal)))
        assert game.ending_moves(state) == [] and game.landing_cells(state) == []
    assert seen_win and seen_none and (seen_draw or name == "connect4")


def test_line_heuristic_scores_every_line_of_four_by_its_rule() -> None:
    from payoff.envs.games.connect4 import WINDOWS
    from payoff.envs.games.players import line_heuristic

    def by_rule(state) -> float:  # the docstring's rule, line by line
        mover, score = state.to_play + 1, 0
        for line in WINDOWS:
            cells = list(state.board[line])
            mine, empty = cells.count(mover), cells.count(0)
            theirs = 4 - mine - empty
            score += 5 * (mine == 3 and empty == 1) + 2 * (mine == 2 and empty == 2)
            score -= 4 * (theirs == 3 and empty == 1)
        return float(score + 3 * sum(state.board[3::7] == mover))

    game, rng, checked = make_game("connect4"), np.random.default_rng(0), 0
    for _ in range(40):
        state = game.initial_state()
        while game.outcome(state) is None:
            assert line_heuristic(game, state) == by_rule(state)
            checked += 1
            state = game.play(state, int(rng.choice(np.flatnonzero(game.legal_mask(state)))))
    assert checked > 500
    assert line_heuristic(make_game("tictactoe"), make_game("tictactoe").initial_state()) == 0.0


class Nim:
    """Take 1 or 2 from a pile of 5; who takes the last stone wins. Variants break one rule."""

    name, num_actions, shape = "nim", 2, (1, 5)

    def __init__(self, stuck_at: int | None = None, endless: bool = False):
        self.stuck_at, self.endless = stuck_at, endless

    def initial_state(self) -> GameState:
        return GameState(board=np.ones(5, np.int8), to_play=0, moves=0)

    def left(self, state: GameState) -> int:
        return int(state.board.sum())

    def legal_mask(self, state: GameState) -> np.ndarray:
        if self.left(state) == self.stuck_at:
            return np.zeros(2, bool)
        return np.array([True, self.left(state) >= 2 or self.endless])

    def play(self, state: GameState, action: int) -> GameState:
        if action not in (0, 1) or not self.legal_mask(state)[action]:
            raise IllegalMoveError(f"cannot take {action + 1}")
        board = state.board.copy()
        if not self.endless:
            board[np.flatnonzero(board)[: action + 1]] = 0
        ended = not board.any()
        return GameState(
            board, 1 - state.to_play, state.winner if not ended else state.to_play, state.moves + 1
        )

    def outcome(self, state: GameState) -> float | None:
        return None if state.winner is None else (1.0 if state.winner == state.to_play else -1.0)

    def encode(self, state: GameState) -> np.ndarray:
        return np.stack([state.board[None].astype(np.float32), np.zeros((1, 5), np.float32)])

    def symmetries(self, planes, policy):
        return [(planes, policy)]

    def render(self, state: GameState) -> str:
        return f"{self.left(state)} left"


class EndlessNim(Nim):
    def __init__(self):
        super().__init__(endless=True)


class ShapeyNim(Nim):
    def encode(self, state: GameState) -> np.ndarray:
        planes = super().encode(state)
        return planes if state.moves == 0 else planes[:, :, :4]


class LopsidedNim(Nim):
    """The second player may only take one stone."""

    def legal_mask(self, state: GameState) -> np.ndarray:
        mask = super().legal_mask(state)
        return mask & np.array([True, state.to_play == 0])


class StuckNim(Nim):
    def __init__(self):
        super().__init__(stuck_at=3)


def test_your_own_game_by_module_and_class_and_games_that_cannot_be_played():
    from payoff.algos.alphazero import AlphaZero
    from payoff.core.errors import PayoffError

    small = dict(
        iterations=1,
        games_per_iteration=2,
        train_steps=2,
        batch_size=4,
        gate_games=2,
        gate_simulations=4,
        eval_games=2,
        eval_simulations=4,
        baselines=["random"],
        final_eval_games=2,
        mcts={"simulations": 8},
    )
    agent = AlphaZero(game="test_games:Nim", **small)  # was "unknown game"
    assert isinstance(agent.game, Nim)
    with pytest.raises(ConfigError, match="your own game: 'module:Class'"):
        AlphaZero(game="nimm", **small)
    # a game that never ends stopped nothing: self-play ran on without a word
    with pytest.raises(PayoffError, match="'nim' has not ended after 1,000 plies"):
        AlphaZero(game="test_games:EndlessNim", **small).learn()
    # planes of another shape after the first move: torch's matmul error, naming nothing
    with pytest.raises(PayoffError, match=r"encode\(\) gave planes of shape \(2, 1, 4\)"):
        AlphaZero(game="test_games:ShapeyNim", **small).learn()
    # no legal move in a running position: the search played action -1
    with pytest.raises(PayoffError, match="legal_mask allows no move in a position that has not"):
        AlphaZero(game="test_games:StuckNim", **small).learn()


def test_positions_apart_only_in_plies_played_are_different_keys():
    one = GameState(np.zeros(9, np.int8), 0, None, 2)
    assert one.key() != GameState(np.zeros(9, np.int8), 0, None, 4).key()


def test_greedy_looks_for_threats_among_the_moves_the_opponent_may_take():
    from payoff.envs.games.players import GreedyPlayer

    game = LopsidedNim()  # the greedy player tried the second player's "take 2": illegal
    assert GreedyPlayer(game).choose(game.initial_state()) in (0, 1)


def test_max_plies_none_means_the_default_and_matches_count_plies():
    from payoff.core.errors import PayoffError
    from payoff.envs.games.players import RandomPlayer

    class NoLimitOfItsOwn(EndlessNim):
        max_plies = None

    class Ten(EndlessNim):
        max_plies = 10

    for game, plies in ((NoLimitOfItsOwn(), "1,000"), (Ten(), "10")):
        with pytest.raises(PayoffError, match=f"has not ended after {plies} plies"):
            play_match(game, RandomPlayer(game), RandomPlayer(game, 1), games=2)
