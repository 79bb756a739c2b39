"""Z006 compute-grad-norm-off: zero_optimization.compute_grad_norm false where it is not allowed.

What DeepSpeed does: ``compute_grad_norm: false`` skips the global gradient-norm pass. 0.19.8
allows it only when nothing needs the norm:

* only ZeRO stage 1 or 2 (``DeepSpeedZeroConfig`` validator: "compute_grad_norm=false is supported
  only with ZeRO Stage 1 or 2");
* with ``gradient_clipping: 0``. Note the default is **1.0** in 0.19.8, so leaving
  gradient_clipping out fails ("compute_grad_norm=false requires gradient_clipping=0",
  ``stage_1_and_2.py``);
* without optimizer offload ("does not support optimizer offload");
* not with BF16_Optimizer (stage 1 + bf16 + ``grad_accum_dtype: fp32``, ``engine.py``).

The key and these checks arrive in 0.19.7 (``DeepSpeedZeroConfig.compute_grad_norm``; absent in
0.19.6's sdist): with ``--deepspeed-version`` before it, V001 reports the key instead.

Anti-pattern::

    # gradient_clipping not given: it defaults to 1.0
    "zero_optimization": {"stage": 2, "compute_grad_norm": false}

Fix::

    "gradient_clipping": 0.0,
    "zero_optimization": {"stage": 2, "compute_grad_norm": false}
"""

from __future__ import annotations

from advisor.config.effective import _as_bool
from advisor.config.versions import DEFAULT_RELEASE, key_status
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zero_raw, zptr


@register
class ComputeGradNormOff(Rule):
    code = "Z006"
    reads_stage = True
    name = "compute-grad-norm-off"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        zr = zero_raw(ctx.raw)
        if _as_bool(zr.get("compute_grad_norm")) is not False:
            return
        ptr = zptr("compute_grad_norm")
        rel = ctx.release.checked if ctx.release is not None else DEFAULT_RELEASE
        if key_status(ptr, rel).state == "absent":
            return  # before 0.19.7 neither the key nor its checks exist: V001 reports the key
        ec = ctx.effective
        z = ec.zero
        fix_rm = "remove zero_optimization.compute_grad_norm"
        if z.stage not in (1, 2):
            yield self.finding(ptr, f"compute_grad_norm false is only supported with ZeRO stage 1 or 2 (stage is "
                                    f"{z.stage}): DeepSpeed rejects the config", fix_rm)
            return
        if ec.gradient_clipping > 0:
            given = "gradient_clipping" in ctx.raw
            yield self.finding(ptr, f"compute_grad_norm false requires gradient_clipping 0, but it is "
                                    f"{ec.gradient_clipping}" + ("" if given else f" (the default of DeepSpeed {rel})") +
                                    ": deepspeed.initialize raises ValueError",
                               f"set \"gradient_clipping\": 0.0, or {fix_rm}")
        if ec.offload_optimizer_effective != "none":
            yield self.finding(ptr, "compute_grad_norm false does not support optimizer offload: deepspeed.initialize "
                                    "raises ValueError", f"{fix_rm}, or remove offload_optimizer")
        elif z.stage == 1 and ec.model_dtype == "bf16" and ec.grad_dtype == "fp32":
            yield self.finding(ptr, "compute_grad_norm false is not supported with bf16 + fp32 gradient accumulation "
                                    "at stage 1 (BF16_Optimizer): deepspeed.initialize raises ValueError", fix_rm)
