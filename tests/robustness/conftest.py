"""Robustness suite: hypothesis profiles and shared helpers.

Profiles (select with the environment variable ``HYPOTHESIS_PROFILE``, default ``ci``):

* ``ci``: bounded so that the whole ``tests/robustness`` folder runs in about two minutes on two
  cores; ``derandomize=True`` so that a CI run is reproducible (the same examples every time),
  ``deadline=None`` because a shared machine makes per-example timing meaningless.
* ``long``: for a run by hand (``HYPOTHESIS_PROFILE=long python3 -m pytest tests/robustness``):
  many more examples, random seeds, and more mutations per corpus config in the CLI fuzzer.

The fuzzer (test_fuzz_cli.py) reads :data:`FUZZ_ROUNDS` for how many random variants of each
mutation it writes per corpus config.
"""

from __future__ import annotations

import os
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.register_profile(
    "long", max_examples=2000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
