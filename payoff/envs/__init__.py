"""Environments: creation from any Gymnasium id, and payoff's own envs under `payoff/`."""

from payoff.envs.make import EnvConfig, make_env

__all__ = ["EnvConfig", "make_env"]
