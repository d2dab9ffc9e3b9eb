"""payoff/KartTrack-v0: a top-down kart on closed tracks, simulated for many karts at once in NumPy.

The kart is a kinematic bicycle driven at constant speed (or with a throttle), steered by one
continuous action. Each step a small random yaw disturbance (road bumps, wheel slip) knocks it
off its line, so a driver must keep correcting; a driver that only ever saw perfect,
near-centre driving has never seen a correction (the compounding-errors story of imitation
learning).

Observation (float32, 10 values by default):
    [0] lateral offset from the centre line / track half-width (left is positive; |x| > 1 is
        off the track)
    [1] heading error (radians, kart heading minus centre-line heading, wrapped to [-pi, pi])
    [2] speed / reference speed
    [3:] centre-line curvature at the lookahead distances ahead, times `CURVATURE_SCALE`
Action: steering in [-1, 1] (times max_steer radians; positive turns left), plus throttle in
    [-1, 1] when `throttle=True`.
Reward: progress along the centre line, in percent of a lap (a whole lap is 100), minus
    `time_cost` per step (0 by default; with `throttle=True` a time cost makes fast laps pay).
Termination: the kart leaves the track (failure) or completes one lap (info["is_success"]).
Truncation: after `time_limit` times the steps a lap takes at the reference speed.

Tracks:
    shipped ones by name ("oval", "kidney", "clover", "bean"), "train" (each reset draws a
    procedural track of the training family, or a shipped one), "heldout" (each reset draws
    from a different family with more, tighter bends in both directions, never used for
    training), or "train:SEED" / "heldout:SEED" for one fixed procedural track.

`KartBatch` is the batched simulator (N karts, each on its own track); `KartTrackEnv` is the
Gymnasium env (one kart) and `KartVectorEnv` the Gymnasium vector env (N karts, one array
step), both thin layers over it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from payoff.core.errors import EnvError, suggest

TRACK_POINTS = 512  # centre-line samples per track, equally spaced by arc length
LOOKAHEAD = (0.0, 2.0, 4.0, 6.0, 9.0, 12.0, 16.0)  # metres ahead where curvature is observed
CURVATURE_SCALE = 4.0  # curvature 0.25 1/m (a 4 m radius bend) reads as 1.0
WHEELBASE = 1.0  # metres
MAX_CURVATURE = 0.3  # procedural tracks never bend tighter than a 3.3 m radius
OBS_LIMIT = 5.0  # observations are clipped to +-5 (a kart is off the track beyond 1)
SEARCH = np.arange(-6, 15)  # centre-line indices searched around the last nearest point


# ---- tracks ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Track:
    """A closed centre line sampled at TRACK_POINTS equally spaced points."""

    name: str
    points: np.ndarray  # [M, 2] metres
    heading: np.ndarray  # [M] radians, direction of travel
    curvature: np.ndarray  # [M] 1/m, positive bends left
    length: float  # metres

    @property
    def spacing(self) -> float:
        return self.length / len(self.points)


def _wrap(angle: np.ndarray) -> np.ndarray:
    return (angle + np.pi) % (2 * np.pi) - np.pi


def track_from_radius(name: str, radius: Callable[[np.ndarray], np.ndarray]) -> Track:
    """A track whose centre line is the polar curve r(theta), driven counter-clockwise."""
    theta = np.linspace(0.0, 2 * np.pi, 4096, endpoint=False)
    r = radius(theta)
    dense = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1)
    closed = np.vstack([dense, dense[:1]])
    seg = np.linalg.norm(np.diff(closed, axis=0), axis=1)
    arc = np.concatenate([[0.0], np.cumsum(seg)])
    length = float(arc[-1])
    s = np.linspace(0.0, length, TRACK_POINTS, endpoint=False)
    points = np.stack([np.interp(s, arc, closed[:, 0]), np.interp(s, arc, closed[:, 1])], axis=1)
    # Central differences on the closed loop: heading, then curvature as d(heading)/ds.
    forward = np.roll(points, -1, axis=0) - np.roll(points, 1, axis=0)
    heading = np.arctan2(forward[:, 1], forward[:, 0])
    dheading = _wrap(np.roll(heading, -1) - np.roll(heading, 1))
    curvature = dheading / (2 * length / TRACK_POINTS)
    return Track(name, points, heading, curvature, length)


def _harmonic_radius(
    base: float, orders: np.ndarray, amplitudes: np.ndarray, phases: np.ndarray
) -> Callable[[np.ndarray], np.ndarray]:
    def radius(theta: np.ndarray) -> np.ndarray:
        wiggle = (amplitudes[:, None] * np.cos(orders[:, None] * theta + phases[:, None])).sum(0)
        return base * (1.0 + wiggle)

    return radius


SHIPPED: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "oval": lambda t: 14.0 / np.sqrt((np.cos(t) / 1.0) ** 4 + (np.sin(t) / 0.6) ** 4) ** 0.5,
    "kidney": _harmonic_radius(
        14.0, np.array([2, 3]), np.array([0.12, 0.06]), np.array([0.0, 1.0])
    ),
    "clover": _harmonic_radius(15.0, np.array([3]), np.array([0.09]), np.array([0.3])),
    "bean": _harmonic_radius(13.0, np.array([1, 2]), np.array([0.15, 0.12]), np.array([0.5, 2.0])),
}
FAMILIES = ("train", "heldout")


def procedural_track(family: str, seed: int) -> Track:
    """One track of a procedural family, the same for the same (family, seed).

    train: 2nd-3rd harmonics of a 12-17 m radius (gentle, mostly left-hand bends).
    heldout: 4th-5th harmonics (more, tighter bends, right-handers included): a different
    family, so a policy that only memorized the training tracks' bends is found out.
    Amplitudes shrink until the tightest bend is within MAX_CURVATURE.
    """
    if family not in FAMILIES:
        raise EnvError(f"unknown track family {family!r}; valid: {', '.join(FAMILIES)}")
    rng = np.random.default_rng([seed, FAMILIES.index(family)])
    base = rng.uniform(12.0, 17.0)
    orders = np.array([2, 3]) if family == "train" else np.array([4, 5])
    amplitudes = rng.uniform(0.04, 0.14, size=2) * (1.0 if family == "train" else 0.8)
    phases = rng.uniform(0, 2 * np.pi, size=2)
    for _ in range(20):
        track = track_from_radius(
            f"{family}:{seed}", _harmonic_radius(base, orders, amplitudes, phases)
        )
        if np.abs(track.curvature).max() <= MAX_CURVATURE:
            return track
        amplitudes = amplitudes * 0.85
    return track


def get_track(spec: str, rng: np.random.Generator | None = None) -> Track:
    """A track from a spec: a shipped name, 'train', 'heldout', or 'train:SEED'/'heldout:SEED'."""
    if spec in SHIPPED:
        return track_from_radius(spec, SHIPPED[spec])
    family, _, seed_text = spec.partition(":")
    if family in FAMILIES:
        if seed_text:
            try:
                seed = int(seed_text)
            except ValueError:
                raise EnvError(f"track {spec!r}: the seed after ':' must be an integer") from None
            return procedural_track(family, seed)
        rng = rng if rng is not None else np.random.default_rng()
        if family == "train" and rng.random() < 0.25:
            name = list(SHIPPED)[int(rng.integers(len(SHIPPED)))]
            return track_from_radius(name, SHIPPED[name])
        return procedural_track(family, int(rng.integers(2**31)))
    valid = [*SHIPPED, *FAMILIES, "train:SEED", "heldout:SEED"]
    raise EnvError(f"unknown track {spec!r}.{suggest(spec, valid)} Valid: {', '.join(valid)}")


# ---- the batched simulator ---------------------------------------------------------------
class KartBatch:
    """N karts, each on its own track, stepped together with array operations.

    Call `reset(rng, which)` for the karts in `which` (all by default), then `step(actions)`;
    the batch does not reset finished karts by itself (the Gymnasium layers decide when).
    """

    def __init__(
        self,
        num: int,
        track: str = "train",
        speed: float = 6.0,
        throttle: bool = False,
        max_steer: float = 0.5,
        half_width: float = 1.0,
        yaw_noise: float = 0.005,
        dt: float = 0.1,
        time_limit: float = 2.0,
        time_cost: float = 0.0,
    ):
        get_track(track, np.random.default_rng(0))  # fail early on a bad spec
        self.num, self.track_spec = num, track
        self.speed, self.throttle, self.max_steer = speed, throttle, max_steer
        self.half_width, self.yaw_noise, self.dt, self.time_limit = (
            half_width,
            yaw_noise,
            dt,
            time_limit,
        )
        self.time_cost = time_cost
        self.points = np.zeros((num, TRACK_POINTS, 2))
        self.heading_table = np.zeros((num, TRACK_POINTS))
        self.curvature_table = np.zeros((num, TRACK_POINTS))
        self.length = np.ones(num)
        self.track_names = [""] * num
        self.pos = np.zeros((num, 2))
        self.yaw = np.zeros(num)
        self.vel = np.full(num, speed)
        self.index = np.zeros(num, dtype=np.int64)  # nearest centre-line point
        self.s = np.zeros(num)  # arc length of the nearest point (plus projection)
        self.offset = np.zeros(num)  # signed lateral offset, metres
        self.progress = np.zeros(num)  # metres driven along the centre line this episode
        self.steps = np.zeros(num, dtype=np.int64)
        self.max_steps = np.ones(num, dtype=np.int64)
        self._rows = np.arange(num)

    @property
    def obs_dim(self) -> int:
        return 3 + len(LOOKAHEAD)

    @property
    def act_dim(self) -> int:
        return 2 if self.throttle else 1

    def set_track(self, i: int, track: Track) -> None:
        self.points[i], self.heading_table[i] = track.points, track.heading
        self.curvature_table[i], self.length[i] = track.curvature, track.length
        self.track_names[i] = track.name

    def reset(self, rng: np.random.Generator, which: np.ndarray | None = None) -> np.ndarray:
        """Put the karts in `which` (bool mask or indices) on a fresh track at a random point of
        the centre line, aligned with it; returns all observations."""
        indices = self._rows if which is None else self._rows[which]
        for i in indices:
            self.set_track(int(i), get_track(self.track_spec, rng))
            start = int(rng.integers(TRACK_POINTS))
            self.index[i] = start
            self.pos[i] = self.points[i, start]
            self.yaw[i] = self.heading_table[i, start]
            self.s[i] = start * self.length[i] / TRACK_POINTS
            self.max_steps[i] = int(
                math.ceil(self.time_limit * self.length[i] / (self.speed * self.dt))
            )
        self.vel[indices] = self.speed
        self.offset[indices] = 0.0
        self.progress[indices] = 0.0
        self.steps[indices] = 0
        return self.observe()

    def _project(self) -> None:
        """Nearest centre-line point near the last one, then the offset and arc position."""
        candidates = (self.index[:, None] + SEARCH[None, :]) % TRACK_POINTS  # [N, W]
        near = self.points[self._rows[:, None], candidates]  # [N, W, 2]
        distance = ((near - self.pos[:, None, :]) ** 2).sum(-1)
        self.index = candidates[self._rows, distance.argmin(1)]
        heading = self.heading_table[self._rows, self.index]
        delta = self.pos - self.points[self._rows, self.index]
        along = delta[:, 0] * np.cos(heading) + delta[:, 1] * np.sin(heading)
        self.offset = -delta[:, 0] * np.sin(heading) + delta[:, 1] * np.cos(heading)
        self.s = (self.index * self.length / TRACK_POINTS + along) % self.length

    def observe(self) -> np.ndarray:
        heading = self.heading_table[self._rows, self.index]
        spacing = self.length / TRACK_POINTS
        ahead = (
            self.index[:, None]
            + np.round(np.asarray(LOOKAHEAD)[None, :] / spacing[:, None]).astype(np.int64)
        ) % TRACK_POINTS
        curvature = self.curvature_table[self._rows[:, None], ahead]
        obs = np.empty((self.num, self.obs_dim), dtype=np.float32)
        obs[:, 0] = np.clip(self.offset / self.half_width, -OBS_LIMIT, OBS_LIMIT)
        obs[:, 1] = _wrap(self.yaw - heading)
        obs[:, 2] = self.vel / self.speed
        obs[:, 3:] = np.clip(curvature * CURVATURE_SCALE, -OBS_LIMIT, OBS_LIMIT)
        return obs

    def step(
        self, actions: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Advance every kart by dt; returns (obs, reward, terminated, truncated)."""
        actions = np.clip(np.asarray(actions, dtype=np.float64).reshape(self.num, -1), -1.0, 1.0)
        steer = actions[:, 0] * self.max_steer
        if self.throttle:
            # +-3 m/s^2, kept between a crawl and 1.5x the reference speed.
            self.vel = np.clip(self.vel + 3.0 * actions[:, 1] * self.dt, 0.5, 1.5 * self.speed)
        yaw_rate = self.vel / WHEELBASE * np.tan(steer)
        self.yaw = _wrap(
            self.yaw + yaw_rate * self.dt + self.yaw_noise * rng.standard_normal(self.num)
        )
        self.pos[:, 0] += self.vel * np.cos(self.yaw) * self.dt
        self.pos[:, 1] += self.vel * np.sin(self.yaw) * self.dt
        previous = self.s
        self._project()
        half = self.length / 2
        moved = (self.s - previous + half) % self.length - half  # wrapped, metres
        self.progress += moved
        self.steps += 1
        reward = 100.0 * moved / self.length - self.time_cost
        off_track = np.abs(self.offset) > self.half_width
        lap = self.progress >= self.length
        terminated = off_track | lap
        truncated = ~terminated & (self.steps >= self.max_steps)
        return self.observe(), reward, terminated, truncated

    def lap_completed(self) -> np.ndarray:
        return self.progress >= self.length

    # ---- drawing ----------------------------------------------------------------------
    def render(
        self, i: int = 0, size: int = 320, trail: list[np.ndarray] | None = None
    ) -> np.ndarray:
        """An rgb_array [size, size, 3] of kart i on its track (with an optional trail)."""
        from PIL import Image, ImageDraw, ImageFont

        points = self.points[i]
        lo, hi = points.min(0) - 3.0, points.max(0) + 3.0
        scale = (size - 8) / float((hi - lo).max())

        def px(xy: np.ndarray) -> list[tuple[float, float]]:
            xy = np.atleast_2d(xy)
            return [(4 + (x - lo[0]) * scale, size - 4 - (y - lo[1]) * scale) for x, y in xy]

        image = Image.new("RGB", (size, size), (84, 140, 70))
        draw = ImageDraw.Draw(image)
        loop = px(np.vstack([points, points[:1]]))
        draw.line(
            loop,
            fill=(235, 235, 235),
            width=max(2, int(2 * self.half_width * scale) + 4),
            joint="curve",
        )
        draw.line(
            loop, fill=(70, 70, 76), width=max(1, int(2 * self.half_width * scale)), joint="curve"
        )
        for k in range(0, TRACK_POINTS, 16):  # dashed centre line
            draw.line(px(points[k : k + 7]), fill=(200, 200, 120), width=1)
        if trail is not None and len(trail) > 1:
            draw.line(px(np.asarray(trail)), fill=(90, 170, 255), width=2)
        yaw, pos = self.yaw[i], self.pos[i]
        body = np.array([[1.2, 0.0], [-0.8, 0.6], [-0.8, -0.6]])
        rotation = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])
        draw.polygon(px(pos + body @ rotation.T), fill=(230, 40, 40), outline=(0, 0, 0))
        off = abs(self.offset[i]) > self.half_width
        status = "OFF TRACK" if off else f"lap {min(self.progress[i] / self.length[i], 1.0):.0%}"
        try:
            font = ImageFont.load_default(size=max(10, size // 22))
        except TypeError:  # Pillow < 10.1 has one fixed-size default font
            font = ImageFont.load_default()
        name = self.track_names[i].split(":")[0]  # the family, not the long procedural seed
        draw.text(
            (8, 6),
            f"{name}  step {self.steps[i]}  {status}",
            fill=(255, 60, 60) if off else (255, 255, 255),
            font=font,
        )
        return np.asarray(image, dtype=np.uint8)


# ---- Gymnasium layers --------------------------------------------------------------------
def _spaces(batch: KartBatch) -> tuple[gym.spaces.Box, gym.spaces.Box]:
    high = np.full(batch.obs_dim, OBS_LIMIT, dtype=np.float32)
    high[1] = np.pi
    low = -high
    low[2], high[2] = 0.0, 2.0  # speed / reference speed (at most 1.5 with throttle)
    observation_space = gym.spaces.Box(low, high, dtype=np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, shape=(batch.act_dim,), dtype=np.float32)
    return observation_space, action_space


class KartTrackEnv(gym.Env):
    """One kart on a closed track (see the module docstring for observations and rewards)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None, **kwargs: Any):
        if render_mode not in (None, "rgb_array"):
            raise EnvError(f"KartTrack renders only 'rgb_array', got render_mode={render_mode!r}")
        self.render_mode = render_mode
        self.batch = KartBatch(1, **kwargs)
        self.observation_space, self.action_space = _spaces(self.batch)
        self._trail: list[np.ndarray] = []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        obs = self.batch.reset(self.np_random)
        self._trail = [self.batch.pos[0].copy()]
        return obs[0], self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated = self.batch.step(
            np.asarray(action)[None], self.np_random
        )
        self._trail.append(self.batch.pos[0].copy())
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), self._info()

    def _info(self) -> dict[str, Any]:
        b = self.batch
        return {
            "is_success": bool(b.lap_completed()[0]),
            "cross_track_error": float(b.offset[0]),
            "lap_fraction": float(b.progress[0] / b.length[0]),
            "track": b.track_names[0],
        }

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return self.batch.render(0, trail=self._trail[-200:])


class KartVectorEnv(gym.vector.VectorEnv):
    """N karts in one NumPy batch, with Gymnasium's default next-step autoreset: the step
    after an episode ends resets that kart and returns its first observation (reward 0)."""

    metadata = {"render_modes": [], "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 8, **kwargs: Any):
        kwargs.pop("render_mode", None)
        self.num_envs = num_envs
        self.batch = KartBatch(num_envs, **kwargs)
        self.single_observation_space, self.single_action_space = _spaces(self.batch)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._autoreset = np.zeros(num_envs, dtype=bool)
        self._rng = np.random.default_rng()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._autoreset[:] = False
        return self.batch.reset(self._rng), {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, reward, terminated, truncated = self.batch.step(actions, self._rng)
        if self._autoreset.any():
            obs = self.batch.reset(self._rng, self._autoreset)
            reward[self._autoreset] = 0.0
            terminated[self._autoreset] = False
            truncated[self._autoreset] = False
        info = {
            "is_success": self.batch.lap_completed(),
            "cross_track_error": self.batch.offset.copy(),
        }
        self._autoreset = terminated | truncated
        return obs, reward, terminated, truncated, info

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue exactly (karts, tracks, RNG, pending resets)."""
        arrays = {k: v.copy() for k, v in vars(self.batch).items() if isinstance(v, np.ndarray)}
        return {
            "arrays": arrays,
            "track_names": list(self.batch.track_names),
            "rng": self._rng.bit_generator.state,
            "autoreset": self._autoreset.copy(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        for key, value in state["arrays"].items():
            setattr(self.batch, key, np.array(value))
        self.batch.track_names = list(state["track_names"])
        self._rng.bit_generator.state = state["rng"]
        self._autoreset = np.array(state["autoreset"], dtype=bool)
