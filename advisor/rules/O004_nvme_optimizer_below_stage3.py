"""O004 nvme-optimizer-below-stage3: optimizer "nvme" offload at ZeRO stage 1 or 2.

What DeepSpeed does: ZeRO stages 1 and 2 (``stage_1_and_2.py``) treat any
``offload_optimizer.device`` other than none as CPU offload. With ``device: "nvme"`` they
allocate exactly the CPU-offload state (fp32 master, moments and fp32 gradients in host memory),
create no swap files and do no NVMe I/O (verified on 0.19.8). NVMe swapping of optimizer state
exists only in ZeRO-3. One exception makes it worse: at stage 1 with bf16 and
``data_types.grad_accum_dtype: "fp32"`` the engine picks BF16_Optimizer and ignores the block
completely: all optimizer state stays on the GPU.

Why it matters: host memory is sized for NVMe offload (a few buffers) and the job is killed by the
OOM killer, or GPU memory runs out in the BF16_Optimizer case.

Anti-pattern::

    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}

Fix: say what happens (``"device": "cpu"``) and budget host memory for it, or use stage 3 for
real NVMe offload::

    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zptr


@register
class NvmeOptimizerBelowStage3(Rule):
    code = "O004"
    reads_stage = True
    name = "nvme-optimizer-below-stage3"
    severity = "warning"

    def check(self, ctx: LintContext):
        ec = ctx.effective
        z = ec.zero
        if z.stage not in (1, 2) or z.offload_optimizer.device != "nvme":
            return
        ptr = zptr("offload_optimizer", "device")
        if ec.offload_optimizer_effective == "none":
            yield self.finding(ptr, "offload_optimizer nvme is ignored: ZeRO-1 with bf16 and fp32 gradient "
                                    "accumulation uses BF16_Optimizer, which keeps all optimizer state on the GPU",
                               'set "device": "cpu" (then DeepSpeedZeroOptimizer offloads to host memory) or use '
                               "zero_optimization.stage 3 for NVMe offload")
            return
        yield self.finding(ptr, f"offload_optimizer nvme at ZeRO stage {z.stage} is plain CPU offload: optimizer "
                                "state lives in host memory, nothing goes to NVMe (NVMe swapping exists only in ZeRO-3)",
                           'set "device": "cpu" and budget host memory for it, or set zero_optimization.stage to 3 '
                           "for NVMe offload")
