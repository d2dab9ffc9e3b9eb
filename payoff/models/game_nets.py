"""Policy/value networks for board games: one trunk, a move-logit head and a value head.

Input: [B, 2, rows, cols] planes (the mover's stones, the opponent's), as produced by
`Game.encode`. Output: move logits [B, num_actions] and a value in [-1, 1] [B] for the
player to move. Two trunks:

- 'resnet': a small AlphaZero-style residual tower (3x3 convs + batch norm), which shares
  what it learns about a pattern across the whole board.
- 'mlp': two fully connected layers; faster on tiny boards such as tic-tac-toe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

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
    """

    kind: Literal["resnet", "mlp"] = "resnet"
    channels: int = 32
    blocks: int = 3
    hidden: int = 64
    colour_plane: bool = False

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
        self, shape: tuple[int, int], num_actions: int, config: GameNetConfig | None = None
    ):
        super().__init__()
        config = config or GameNetConfig()
        self.config, self.shape, self.num_actions = config, tuple(shape), num_actions
        rows, cols = shape
        cells = rows * cols
        inputs = 3 if config.colour_plane else 2
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

    def forward(self, planes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.config.colour_plane:
            # The first player moves whenever both sides have as many stones on the board.
            stones = planes.sum(dim=(2, 3))  # [B, 2]
            first = (stones[:, 0] == stones[:, 1]).to(planes.dtype)  # [B]
            colour = first[:, None, None, None].expand(-1, 1, *planes.shape[2:])
            planes = torch.cat([planes, colour], dim=1)  # [B, 3, rows, cols]
        features = self.trunk(planes)
        return self.policy_head(features), self.value_head(features).squeeze(-1)
