"""The optional compiled form of the per-envelope work (speed_runtime/core/_compiled.c, see
speed_runtime/core/accel.py). It is built when a C compiler and the headers of Python and
libsodium are there (apt-get install gcc python3-dev libsodium-dev); otherwise `optional=True`
makes the build warn and go on, and the package runs in pure Python. Everything else is in
pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("speed_runtime.core._compiled", ["speed_runtime/core/_compiled.c"],
                             libraries=["sodium"], extra_compile_args=["-std=c11"], optional=True)])
