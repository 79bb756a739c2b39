"""deepspeed-advisor: lint DeepSpeed configs and account for per-rank training state.

Data flows one way:

    loading (file -> raw dict + positions)
      -> effective (raw dict -> EffectiveConfig: defaults, "auto", aliases, ignored keys)
      -> plan (EffectiveConfig x model inventory x cluster)
      -> ledger (bytes by class x tier x rank)
      -> views (lint findings, estimate tables, check verdicts, reports)

Nothing in this package imports torch or deepspeed at module import time; only
``advisor.engine.*`` (measure, preflight) and ``advisor.model.inventory.from_module`` touch them,
lazily.

In a training script, just before ``deepspeed.initialize``::

    import advisor
    advisor.preflight(model, ds_config, seq_len=2048)   # raises advisor.PreflightError if it won't fit
"""

__version__ = "0.1.0"

#: The DeepSpeed release whose defaults and code paths the advisor models.
DEEPSPEED_VERSION = "0.19.8"


# The in-process preflight itself (its module imports torch only when called): its signature and
# docstring, with units and the errors it raises, are what help(advisor.preflight) shows.
from advisor.engine.preflight import PreflightResult, preflight  # noqa: E402,F401


def __getattr__(name):
    if name == "PreflightError":
        from advisor.errors import PreflightError
        return PreflightError
    raise AttributeError(f"module 'advisor' has no attribute {name!r}")
