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


def preflight(model, ds_config, **kwargs):
    """Will ``model`` with ``ds_config`` fit on this device? See
    :func:`advisor.engine.preflight.preflight` (imported on first call: importing ``advisor``
    does not import torch). Returns a PreflightResult; raises :class:`PreflightError`."""
    from advisor.engine.preflight import preflight as _preflight
    return _preflight(model, ds_config, **kwargs)


def __getattr__(name):
    if name == "PreflightError":
        from advisor.errors import PreflightError
        return PreflightError
    raise AttributeError(f"module 'advisor' has no attribute {name!r}")
