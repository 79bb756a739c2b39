"""deepspeed-advisor: lint DeepSpeed configs and account for per-rank training state.

Data flows one way:

    loading (file -> raw dict + positions)
      -> effective (raw dict -> EffectiveConfig: defaults, "auto", aliases, ignored keys)
      -> plan (EffectiveConfig x model inventory x cluster)
      -> ledger (bytes by class x tier x rank)
      -> views (lint findings, estimate tables, check verdicts, reports)

Nothing in this package imports torch or deepspeed at module import time; only
``advisor.engine.measure`` and ``advisor.model.inventory.from_module`` touch them, lazily.
"""

__version__ = "0.1.0"

#: The DeepSpeed release whose defaults and code paths the advisor models.
DEEPSPEED_VERSION = "0.19.8"
