"""O011 offload-client-optimizer: ZeRO-Offload with no optimizer section refuses most client optimizers.

What DeepSpeed does: with no ``optimizer`` section the script passes its own optimizer to
``deepspeed.initialize``. Where ``zero_use_cpu_optimizer()`` is true -- ``offload_optimizer.device`` cpu
or nvme as written, at any stage (``engine.py`` l.1562-1565; the deprecated ``cpu_offload: true`` maps
to cpu) -- ``_configure_optimizer`` (l.2342-2346) raises ``ZeRORuntimeException: You are using
ZeRO-Offload with a client provided optimizer (...)`` unless that optimizer is a
``deepspeed.ops.adam.DeepSpeedCPUAdam`` or ``deepspeed.ops.lion.DeepSpeedCPULion``, or
``zero_force_ds_cpu_optimizer`` is false (default true, ``runtime/constants.py`` l.41-42). A
``torch.optim.AdamW`` -- what most training scripts build -- stops inside ``initialize``.

Not raised under ``--hf``: accelerate 1.16.0 swaps the Trainer's optimizer for DeepSpeedCPUAdam
before ``deepspeed.initialize`` (``accelerator.py`` l.2336-2345). The estimate of such a config
assumes the client passes DeepSpeedCPUAdam and says so on its optimizer line.

Anti-pattern (with ``deepspeed.initialize(model=m, optimizer=torch.optim.AdamW(...), config=...)``)::

    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}

Fix: pass ``DeepSpeedCPUAdam(model.parameters(), ...)`` (or DeepSpeedCPULion) from the script; or write
an ``optimizer`` section (DeepSpeed then builds DeepSpeedCPUAdam itself, ``_configure_basic_optimizer``)
and pass no optimizer::

    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}

or, to keep a torch optimizer, ``"zero_force_ds_cpu_optimizer": false``: it then steps the offloaded
fp32 partitions on the CPU with its own kernels, which DeepSpeed's message warns "in most cases will
yield poor performance" (DeepSpeedCPUAdam is the SIMD-vectorised one).

At ZeRO stage 0 this rule is silent and O002 reports the block: there DeepSpeedCPUAdam, this rule's
fix, asserts on the GPU-resident parameters (``ops/adam/cpu_adam.py`` l.148).
"""

from __future__ import annotations

from advisor.config.effective import DS_CPU_OPTIMIZERS
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zero_raw, zptr

SOURCE = ("engine.py l.2342-2346; zero_use_cpu_optimizer, l.1562-1565, counts devices cpu and nvme; "
          "zero_force_ds_cpu_optimizer defaults to true, runtime/constants.py l.41-42")


@register
class OffloadClientOptimizer(Rule):
    code = "O011"
    reads_stage = True
    name = "offload-client-optimizer"
    severity = "warning"

    def check(self, ctx: LintContext):
        ec = ctx.effective
        if ctx.hf or ec.optimizer.type is not None or isinstance(ctx.raw.get("optimizer"), dict):
            return
        if not ec.client_optimizer_must_be_ds_cpu or ec.zero.stage == 0:
            # stage 0: O002 reports it -- DeepSpeedCPUAdam, this rule's fix, asserts there on GPU-resident params
            return
        block = zero_raw(ctx.raw).get("offload_optimizer")
        ptr = zptr("offload_optimizer", "device") if isinstance(block, dict) else zptr("cpu_offload")
        dev = ec.zero.offload_optimizer.device
        yield self.finding(
            ptr,
            f"offload_optimizer device {dev} with no optimizer section: the optimizer the script passes to "
            f"deepspeed.initialize must be {' or '.join(DS_CPU_OPTIMIZERS)}, any other (torch.optim.AdamW...) is "
            f"refused with ZeRORuntimeException ({SOURCE})",
            "pass deepspeed.ops.adam.DeepSpeedCPUAdam (or deepspeed.ops.lion.DeepSpeedCPULion) as the client "
            "optimizer, or write an optimizer section (DeepSpeed builds DeepSpeedCPUAdam itself) and pass none, or "
            "set zero_force_ds_cpu_optimizer to false (the client optimizer then steps the offloaded fp32 "
            "partitions on the CPU with its own kernels: DeepSpeed warns 'in most cases will yield poor "
            "performance')")
