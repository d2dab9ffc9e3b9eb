"""GIFs of episodes."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from payoff.core.errors import PayoffError
from payoff.core.io import atomic_write_bytes


def write_gif(
    frames: Sequence[np.ndarray], path: str | Path, fps: int = 8, max_side: int = 400
) -> Path:
    """Write rgb frames ([H, W, 3] uint8) as a looping GIF, scaled so the long side <= max_side."""
    if not frames:
        raise PayoffError(
            "no frames to write: the environment rendered nothing (does it support render_mode='rgb_array'?)"
        )
    images = []
    for frame in frames:
        image = Image.fromarray(np.asarray(frame, dtype=np.uint8))
        scale = max_side / max(image.size)
        if scale < 1:
            image = image.resize(
                (int(image.width * scale), int(image.height * scale)), Image.Resampling.NEAREST
            )
        images.append(image.convert("P", palette=Image.Palette.ADAPTIVE))
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=int(1000 / fps),
        loop=0,
    )
    atomic_write_bytes(path, buffer.getvalue())
    return Path(path)
