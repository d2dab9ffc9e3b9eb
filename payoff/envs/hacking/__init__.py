"""Hackable environments: each pays a proxy reward and reports the true objective in `info`.

The agent only ever sees the proxy (unless told to train on something else); the true
objective is there for monitors and for people, so a hack can be caught and measured.
"""

from __future__ import annotations

from payoff.envs.hacking.boatrace import BoatRaceEnv
from payoff.envs.hacking.cleaning import CleaningRobotEnv

# What each env's numeric info keys count (logged per episode as train/episode_<key>):
# reports name the axes by them ("laps finished per episode", not "episode_true_reward").
INFO_LABELS: dict[str, dict[str, str]] = {
    "payoff/BoatRace-v0": BoatRaceEnv.info_labels,
    "payoff/CleaningRobot-v0": CleaningRobotEnv.info_labels,
}


def info_label(env_id: str, key: str) -> str | None:
    """What info key `key` of env `env_id` counts ('laps finished'), or None if not known."""
    return INFO_LABELS.get(env_id, {}).get(key)
