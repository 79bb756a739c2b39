"""O002 offload-optimizer-stage0: optimizer offload without ZeRO.

What DeepSpeed does: at ZeRO stage 0 there is no partitioned optimizer to offload, and
``offload_optimizer`` (or the deprecated ``cpu_offload: true``) does not move anything. It is not
quite ignored though: any ``offload_optimizer.device`` other than none switches a config-built
Adam/AdamW to ``DeepSpeedCPUAdam`` (``engine.py`` ``_configure_basic_optimizer``), which then
runs on parameters that live on the GPU. Its ``step`` asserts ``CPUAdam param is on cuda:0 and
must be 'cpu'`` (``ops/adam/cpu_adam.py``) at the first step, or inside initialize for fp16/bf16,
whose stage-0 wrappers run one step at construction. With no optimizer section (a client
optimizer) it is not ignored either: ``engine.py`` l.2342-2346 refuses any client optimizer but
DeepSpeedCPUAdam / DeepSpeedCPULion while ``zero_force_ds_cpu_optimizer`` is true (rule O011), and
those two assert the same way on GPU-resident parameters (``ops/adam/cpu_adam.py`` l.148,
``ops/lion/cpu_lion.py`` l.108). With ``torch_adam: true``, another config-built optimizer, or a
client optimizer under ``zero_force_ds_cpu_optimizer: false``, the block is ignored.

Anti-pattern::

    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}

Fix: ZeRO-Offload needs ZeRO stage 1 or more (stage 2 is the usual choice)::

    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zero_raw, zptr


@register
class OffloadOptimizerStage0(Rule):
    code = "O002"
    reads_stage = True
    name = "offload-optimizer-stage0"
    severity = "warning"

    def check(self, ctx: LintContext):
        ec = ctx.effective
        z = ec.zero
        if z.stage != 0 or z.offload_optimizer.device == "none":
            return
        key = "offload_optimizer" if isinstance(zero_raw(ctx.raw).get("offload_optimizer"), dict) else "cpu_offload"
        fix = "set zero_optimization.stage to 1 or 2 (ZeRO-Offload), or remove zero_optimization." + key
        if ec.optimizer.family in ("adam", "adamw") and not ec.optimizer.torch_adam:
            yield self.finding(zptr(key), f"offload_optimizer at ZeRO stage 0 turns {ec.optimizer.type} into "
                                          "DeepSpeedCPUAdam on GPU-resident parameters: it asserts 'CPUAdam param is "
                                          "on cuda and must be cpu' at the first optimizer step",
                               fix, severity="error")
        elif ec.optimizer.type is None and ec.client_optimizer_must_be_ds_cpu:
            yield self.finding(zptr(key), "offload_optimizer at ZeRO stage 0 with a client optimizer: DeepSpeed "
                                          "accepts only DeepSpeedCPUAdam / DeepSpeedCPULion (O011), which assert "
                                          "'param is on cuda and must be cpu' at the first step on the GPU-resident "
                                          "parameters of stage 0",
                               fix, severity="error")
        else:
            yield self.finding(zptr(key), "offload_optimizer is ignored at ZeRO stage 0: optimizer state stays on "
                                          "the GPU", fix)
