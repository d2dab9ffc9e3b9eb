"""payoff: reinforcement learning by trial and error, end to end."""

from payoff.core.errors import PayoffError

__version__ = "0.1.0"
__all__ = ["PayoffError", "__version__"]
