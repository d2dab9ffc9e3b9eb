import os

os.environ.setdefault("PAYOFF_PROGRESS", "0")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")

# Models the tests build (pretrained tiny LMs, SFT'd agents) go to a fresh cache, as on a
# new machine, unless the developer points PAYOFF_CACHE somewhere on purpose.
# The process that makes the cache removes it at exit; pytest-xdist's workers inherit it.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

if "PAYOFF_CACHE" not in os.environ:
    os.environ["PAYOFF_CACHE"] = tempfile.mkdtemp(prefix="payoff-test-cache-")
    atexit.register(shutil.rmtree, os.environ["PAYOFF_CACHE"], ignore_errors=True)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ray_cluster():
    """One local 2-CPU Ray instance shared by every Ray test module (startup takes seconds)."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
