"""Policy/value networks for board games: one trunk, a move-logit head and a value head.

Input: [B, 2, rows, cols] planes (the mover's stones, the opponent's), as produced by
`Game.encode`. Output: move logits [B, num_actions] and a value in [-1, 1] [B] for the
player to move. Two trunks:

- 'resnet': a small AlphaZero-style residual tower (3x3 convs + batch norm), which shares
  what it learns about a pattern across the whole board.
- 'mlp': two fully connected layers; faster on tiny boards such as tic-tac-toe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import nn

from payoff.core.config import MAX_DEPTH, MAX_WIDTH, in_range
from payoff.core.errors import ConfigError
from payoff.core.imports import check_weights


@dataclass
class GameNetConfig:
    """Network shape.

    kind: 'resnet' (convolutional, for Connect Four and larger) or 'mlp' (tiny boards).
    channels: convolution width of the resnet trunk.
    blocks: residual blocks in the resnet trunk (each is two 3x3 convolutions).
    hidden: width of the mlp trunk and of the value head.
    colour_plane: add an input plane that is 1 when the player to move is the one who moved
        first (AlphaZero's colour feature). The two stone planes say only "mine" and
        "theirs"; in games where each move adds one stone the side follows from the stone
        counts, but a convolution sees a 3x3 patch, not the whole board's counts. Connect
        Four's endgames turn on it: whose threats sit on odd rows decides who is forced to
        play under whom.
    threat_planes: add, for each side, a plane marking the empty cells where its stone
        would complete a line (a line of the game holding k - 1 of its stones and that one
        empty cell), and a plane marking every other row from the bottom. A 3x3 convolution
        sees a threat's cells only from nearby; these planes put every threat, and the
        parity of its row (which decides Connect Four's endgames under zugzwang), in the
        input. Needs the game's lines (`PolicyValueNet(..., lines=game.lines)`).
    """

    kind: Literal["resnet", "mlp"] = "resnet"
    channels: int = field(default=32, metadata=in_range(0, low_open=True, most=MAX_WIDTH))
    blocks: int = field(default=3, metadata=in_range(0, low_open=True, most=MAX_DEPTH))
    hidden: int = field(default=64, metadata=in_range(0, low_open=True, most=MAX_WIDTH))
    colour_plane: bool = False
    threat_planes: bool = False

    def validate(self) -> None:
        for key in ("channels", "blocks", "hidden"):
            if getattr(self, key) < 1:
                raise ConfigError(f"net '{key}' must be >= 1, got {getattr(self, key)}")


class ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class PolicyValueNet(nn.Module):
    """f(planes) -> (move logits [B, A], value [B]) for the player to move."""

    def __init__(
        self,
        shape: tuple[int, int],
        num_actions: int,
        config: GameNetConfig | None = None,
        lines: np.ndarray | None = None,
    ):
        """lines: the game's winning lines [L, k] of flat cell indices (threat_planes)."""
        super().__init__()
        config = config or GameNetConfig()
        self.config, self.shape, self.num_actions = config, tuple(shape), num_actions
        rows, cols = shape
        cells = rows * cols
        inputs = 2 + int(config.colour_plane) + 3 * int(config.threat_planes)
        if config.threat_planes:
            if lines is None or np.asarray(lines).ndim != 2:
                raise ConfigError(
                    "net.threat_planes needs the game's lines of cells (a game with lines to "
                    "complete, such as tictactoe or connect4)"
                )
            lines_t = torch.as_tensor(np.asarray(lines), dtype=torch.long)
            incidence = torch.zeros(len(lines_t), cells)
            incidence[torch.arange(len(lines_t))[:, None], lines_t] = 1.0
            from_bottom = torch.arange(rows - 1, -1, -1, dtype=torch.float32) % 2 == 0
            parity = from_bottom[:, None].expand(rows, cols).float()
            # not in the state dict: the game gives them again
            self.register_buffer("lines", lines_t, persistent=False)
            self.register_buffer("incidence", incidence, persistent=False)
            self.register_buffer("parity", parity[None, None], persistent=False)
        c, h = int(config.channels), int(config.hidden)
        if config.kind == "resnet":  # the trunk's 3x3 convolutions and the value head's layer
            check_weights(
                9 * c * (inputs + 2 * c * config.blocks) + cells * h, f"a {c}-channel net"
            )
        else:
            check_weights((inputs * cells + 1) * h + (h + 1) * h, f"a {h}-unit net")
        if config.kind == "resnet":
            c = config.channels
            self.trunk: nn.Module = nn.Sequential(
                nn.Conv2d(inputs, c, 3, padding=1, bias=False),
                nn.BatchNorm2d(c),
                nn.ReLU(),
                *[ResidualBlock(c) for _ in range(config.blocks)],
            )
            # 1x1 convolutions squeeze the trunk before the fully connected heads.
            self.policy_head: nn.Module = nn.Sequential(
                nn.Conv2d(c, 2, 1, bias=False),
                nn.BatchNorm2d(2),
                nn.ReLU(),
                nn.Flatten(),
                nn.Linear(2 * cells, num_actions),
            )
            self.value_head: nn.Module = nn.Sequential(
                nn.Conv2d(c, 1, 1, bias=False),
                nn.BatchNorm2d(1),
                nn.ReLU(),
                nn.Flatten(),
                nn.Linear(cells, config.hidden),
                nn.ReLU(),
                nn.Linear(config.hidden, 1),
                nn.Tanh(),
            )
        else:
            h = config.hidden
            self.trunk = nn.Sequential(
                nn.Flatten(), nn.Linear(inputs * cells, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU()
            )
            self.policy_head = nn.Linear(h, num_actions)
            self.value_head = nn.Sequential(nn.Linear(h, 1), nn.Tanh())

    def threats(self, planes: torch.Tensor) -> torch.Tensor:
        """[B, 3, rows, cols]: each side's cells that complete a line, and the row parity."""
        stones = planes.flatten(2)  # [B, 2, cells]
        k = self.lines.shape[1]
        per_line = stones @ self.incidence.T  # [B, 2, L]: each side's stones per line
        # k - 1 stones of one side and none of the other: the line's last cell is empty
        open_lines = (per_line == k - 1) & (per_line.sum(1) == k - 1)[:, None]
        cells = (open_lines.to(planes.dtype) @ self.incidence).clamp(max=1.0)
        cells = cells * (1.0 - stones.sum(1))[:, None]  # only where the cell is empty
        parity = self.parity.to(planes.dtype).expand(len(planes), -1, -1, -1)
        return torch.cat([cells.view(len(planes), 2, *planes.shape[2:]), parity], dim=1)

    def forward(self, planes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        extra = []
        if self.config.colour_plane:
            # The first player moves whenever both sides have as many stones on the board.
            stones = planes.sum(dim=(2, 3))  # [B, 2]
            first = (stones[:, 0] == stones[:, 1]).to(planes.dtype)  # [B]
            extra.append(first[:, None, None, None].expand(-1, 1, *planes.shape[2:]))
        if self.config.threat_planes:
            extra.append(self.threats(planes))
        if extra:
            planes = torch.cat([planes, *extra], dim=1)  # [B, inputs, rows, cols]
        features = self.trunk(planes)
        return self.policy_head(features), self.value_head(features).squeeze(-1)
