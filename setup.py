"""The one thing pyproject.toml cannot say: payoff's native kernels, a C extension.

`payoff/accel/_kernels.c` is compiled at install (`pip install -e .` builds it in place). It
is optional: where no C compiler is found the install goes on and payoff runs its reference
path in torch (payoff/accel/native.py says which is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "payoff.accel._kernels",
            ["payoff/accel/_kernels.c"],
            # No -ffast-math, and a * b + c rounded twice as written: CartPole's float64
            # dynamics stay Gymnasium's bit for bit. -O3 vectorizes the float32 loops.
            extra_compile_args=["-O3", "-ffp-contract=off", "-fno-math-errno"],
            optional=True,
        )
    ]
)
