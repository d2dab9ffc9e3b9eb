import os

os.environ.setdefault("PAYOFF_PROGRESS", "0")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")

# Models the tests build (pretrained tiny LMs, SFT'd agents) go to a fresh cache, as on a
# new machine, unless the developer points PAYOFF_CACHE somewhere on purpose.
import tempfile  # noqa: E402

os.environ.setdefault("PAYOFF_CACHE", tempfile.mkdtemp(prefix="payoff-test-cache-"))
