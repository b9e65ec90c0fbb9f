"""What pyproject.toml cannot say: the optional C accelerator of produce validation.

``kraftpy.protocol._record_scan`` scans the records of a produced batch at C speed. It is
optional: where it cannot be compiled the install goes on, and the broker checks the same rules
with the Python decoder, more slowly (see kraftpy/protocol/record_validation.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kraftpy.protocol._record_scan", ["kraftpy/protocol/_record_scan.c"], optional=True),
    ],
)
