"""payoff's native kernels (payoff/accel/_kernels.c), where they were built, and their BLAS.

The C extension is compiled when payoff is installed; it needs a C compiler, so it may be
missing, and then the reference path (torch, autograd) runs everything it would have done.
Its matrix products run in its own AVX-512 blocks where the CPU has them, else through the
sgemm of the BLAS NumPy uses (found here: the library this process loaded, or the one NumPy
bundles).

`kernels()` gives the module ready to use, or None where it cannot be used: not built, a CPU
without AVX-512 and no BLAS sgemm found, or PAYOFF_NATIVE=0 in the environment (to rule the
kernels out everywhere; `accelerate: false` does it for one run). `native_status()` says
which, in words. `kernels_for(layers)` is None also for a network deeper than the kernels
take (MAX_LAYERS): `hidden=[8] * 17` runs on the reference path.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from types import ModuleType

# (symbol, whether its integers are 64-bit): NumPy >= 2 wheels bundle scipy-openblas64
# (ILP64), older ones openblas64_; a NumPy built against a system BLAS exports cblas_sgemm.
_SGEMM_SYMBOLS = (
    ("scipy_cblas_sgemm64_", True),
    ("cblas_sgemm64_", True),
    ("scipy_cblas_sgemm", False),
    ("cblas_sgemm", False),
)

_loaded: tuple[ModuleType | None, str] | None = None

#: The most Linear layers a network the kernels run may have (_kernels.c's MAX_LAYERS: they
#: keep each layer's size and addresses in fixed arrays); hidden widths + 1.
MAX_LAYERS = 16


def _blas_libraries() -> list[Path]:
    """BLAS libraries to look in: those this process has loaded (Linux's /proc/self/maps:
    the one NumPy links, wherever it came from), then those NumPy bundles (numpy.libs beside
    the package, or .dylibs)."""
    import numpy

    found: list[Path] = []
    maps = Path("/proc/self/maps")
    try:
        lines = maps.read_text().splitlines() if maps.exists() else []
    except OSError:
        lines = []
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            path = Path(fields[5])
            if "blas" in path.name.lower() and path not in found:
                found.append(path)
    package = Path(numpy.__file__).parent
    for folder in (package.parent / "numpy.libs", package / ".dylibs"):
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if "blas" in p.name.lower())
    return found


def _find_sgemm() -> tuple[int, bool] | None:
    """The address of NumPy's BLAS sgemm and whether it takes 64-bit integers."""
    for path in _blas_libraries():
        try:
            library = ctypes.CDLL(str(path))  # the copy NumPy loaded: the same handle
        except OSError:
            continue
        for symbol, ilp64 in _SGEMM_SYMBOLS:
            function = getattr(library, symbol, None)
            if function is not None:
                return ctypes.cast(function, ctypes.c_void_p).value or 0, ilp64
    return None


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get("PAYOFF_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None, "the native kernels are off (PAYOFF_NATIVE=0)"
    try:
        from payoff.accel import _kernels  # type: ignore[attr-defined]
    except ImportError as err:
        return (
            None,
            f"the native kernels were not built ({err}); reinstall payoff where a C compiler is found",
        )
    sgemm = _find_sgemm()
    if sgemm is not None and sgemm[0]:
        _kernels.set_sgemm(*sgemm)
    if not _kernels.products_ready():  # neither AVX-512 nor a BLAS to multiply with
        return None, "the native kernels found no BLAS sgemm and no AVX-512 here"
    return _kernels, "native kernels (payoff/accel/_kernels.c)"


def kernels() -> ModuleType | None:
    """The native kernels module, or None where they cannot be used (see native_status)."""
    global _loaded
    if _loaded is None:
        _loaded = _load()
    return _loaded[0]


def native_status() -> str:
    """Which implementation runs the kernels' work, and why, in a few words."""
    kernels()
    assert _loaded is not None
    return _loaded[1]


def kernels_for(layers: int) -> ModuleType | None:
    """`kernels()` for a network of `layers` Linear layers, or None where it has more than
    MAX_LAYERS (the reference path runs it, as where the kernels were not built)."""
    return kernels() if 1 <= layers <= MAX_LAYERS else None
