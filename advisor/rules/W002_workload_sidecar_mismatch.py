"""W002 workload-sidecar-mismatch: the workload sidecar was written for another config.

``generate -o ds_config.json`` writes ``ds_config.workload.json`` beside it: the sequence length,
checkpointing, attention and parallel sizes its plan assumed (a DeepSpeed config has no key for
them), with the config's batch keys and a digest of the config (``config_sha256``). ``check``,
``estimate`` and ``report`` read it back, but what the DeepSpeed config holds itself is taken
from the config: the micro-batch is ``train_micro_batch_size_per_gpu`` (what DeepSpeed feeds
each rank: ``runtime/config.py`` ``DeepSpeedConfig._batch_assertion`` and the engine's
``train_micro_batch_size_per_gpu()``), the Ulysses degree ``sequence_parallel_size``.

When the config's batch keys (or ``sequence_parallel_size``) are not the ones the sidecar was
written for, the sidecar's other assumptions -- the checkpointing generate chose so that this
micro-batch fits, the tensor-parallel size -- were chosen for a different job (a warning: the
estimate uses the config's values, but the sidecar's checkpointing may not suit them). When only
the digest differs, the config was edited after generate wrote it (information).

Anti-pattern: a generated config edited from micro-batch 2 x 8 accumulation steps to 4 x 4,
its sidecar kept.

Fix: run ``generate`` again for the batch you want (``--force`` replaces both files), or delete
the sidecar and give the workload as flags (``--seq-len``, ``--checkpointing``, ...).
"""

from __future__ import annotations

import os

from advisor.rules import LintContext, Rule, register

#: The sidecar's own field for a config key, for the message.
_SIDE = {"sequence_parallel_size": "sequence_parallel"}


@register
class WorkloadSidecarMismatch(Rule):
    code = "W002"
    name = "workload-sidecar-mismatch"
    severity = "warning"

    def check(self, ctx: LintContext):
        wl = ctx.workload
        if wl is None or not getattr(wl, "sidecar", None):
            return
        side = os.path.basename(wl.sidecar)
        rec = wl.recorded or {}
        kept = [f"{k} {rec[k]}" for k in ("seq_len", "checkpointing", "tensor_parallel", "pipeline_parallel")
                if k in rec and wl.origin.get(k, "").startswith("from ")]
        also = (f"; its {', '.join(kept)} were chosen for that batch and are still used" if kept else "")
        regen = (f"run generate again for the batch you want (--force replaces {side}), or delete {side} "
                 "and give the workload as flags (--seq-len, --checkpointing, ...)")
        if wl.conflicts:
            first = wl.conflicts[0][0]
            diffs = ", ".join(f"{k} {now} (the sidecar: {was})" for k, now, was in wl.conflicts)
            yield self.finding(f"/{first}", f"{side} was written for another config: this one has {diffs}; "
                                             f"the config's values are used{also}",
                               regen, sidecar=wl.sidecar,
                               conflicts={k: {"config": now, "sidecar": was} for k, now, was in wl.conflicts})
        elif wl.stale:
            yield self.finding("", f"the config changed since {side} was written (its config_sha256 differs); "
                                   "the batch keys are the same, and the sidecar's workload is still used"
                                   + (f" ({', '.join(kept)})" if kept else ""),
                               regen, severity="info", sidecar=wl.sidecar)
