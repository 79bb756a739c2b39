"""A002 auto-in-validated-section: "auto" inside a section DeepSpeed validates.

What DeepSpeed does: the pydantic-validated sections (``zero_optimization`` with its
``offload_param``/``offload_optimizer`` blocks, ``fp16``, ``bf16``, the monitors,
``comms_logger``, ``compile``, ...) derive from ``DeepSpeedConfigModel``, whose ``__init__``
(``runtime/config_utils.py``) silently *drops* every value equal to "auto", so the field's
default applies. Nothing is logged. Examples in 0.19.8:

* ``"bf16": {"enabled": "auto"}`` -> false: bf16 is **off**, training runs in fp32 (twice the
  memory of what the user planned) or in fp16 if that is on;
* ``"reduce_bucket_size": "auto"`` -> 500000000 elements: a 1 GB fp16/bf16 gradient bucket, two
  with ``overlap_comm``, whatever the model size;
* ``"stage": "auto"`` -> 0: ZeRO is off;
* ``"stage3_prefetch_bucket_size": "auto"`` -> 50000000, ``"stage3_param_persistence_threshold":
  "auto"`` -> 100000 (the HF Trainer would size both from the model's hidden size).

Not reported with ``--hf``: the HF Trainer fills the values in before DeepSpeed sees them.

Anti-pattern (plain ``deepspeed.initialize`` loop)::

    "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}

Fix: write the values you want::

    "bf16": {"enabled": true}, "zero_optimization": {"stage": 2, "reduce_bucket_size": 200000000}
"""

from __future__ import annotations

from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto

_MAXSIZE = 9_223_372_036_854_775_807

ZERO = {
    "stage": (0, "ZeRO off"), "contiguous_gradients": True, "reduce_scatter": True,
    "reduce_bucket_size": 500_000_000, "use_multi_rank_bucket_allreduce": True, "allgather_partitions": True,
    "allgather_bucket_size": 500_000_000, "overlap_comm": None, "load_from_fp32_weights": True,
    "elastic_checkpoint": False, "sub_group_size": 1_000_000_000, "compute_grad_norm": True,
    "stage3_prefetch_bucket_size": 50_000_000, "prefetch_bucket_size": 50_000_000,
    "stage3_param_persistence_threshold": 100_000, "param_persistence_threshold": 100_000,
    "stage3_model_persistence_threshold": _MAXSIZE, "model_persistence_threshold": _MAXSIZE,
    "stage3_max_live_parameters": 1_000_000_000, "max_live_parameters": 1_000_000_000,
    "stage3_max_reuse_distance": 1_000_000_000, "max_reuse_distance": 1_000_000_000,
    "stage3_gather_16bit_weights_on_model_save": False, "gather_16bit_weights_on_model_save": False,
    "stage3_gather_fp16_weights_on_model_save": False,
    "stage3_module_granularity_threshold": 0, "module_granularity_threshold": 0,
    "stage3_use_all_reduce_for_fetch_params": False, "use_all_reduce_for_fetch_params": False,
    "stage3_allgather_sequential": False, "allgather_sequential": False, "ignore_unused_parameters": True,
    "round_robin_gradients": False, "parameter_alignment": False, "zero_hpz_partition_size": 1,
    "zero_quantized_weights": False, "zero_quantized_nontrainable_weights": False,
    "zero_quantized_gradients": False, "memory_efficient_linear": True, "override_module_apply": True,
    "offload_param": (None, "no parameter offload"), "offload_optimizer": (None, "no optimizer offload"),
}
OFFLOAD_PARAM = {"device": ("none", "nothing offloaded"), "nvme_path": None, "buffer_count": 5,
                 "buffer_size": 100_000_000, "max_in_cpu": 1_000_000_000, "pin_memory": True}
OFFLOAD_OPTIMIZER = {"device": ("none", "nothing offloaded"), "nvme_path": None, "buffer_count": 4, "pin_memory": True,
                     "pipeline_read": False, "pipeline_write": False, "fast_init": False, "ratio": 1.0,
                     "super_offload": False, "cpuadam_cores_perc": 0.8}
FP16 = {"enabled": (False, "fp16 OFF"), "auto_cast": False, "loss_scale": (0, "dynamic loss scaling"),
        "initial_scale_power": 16, "loss_scale_window": 1000, "hysteresis": 2, "consecutive_hysteresis": False,
        "min_loss_scale": 1, "fp16_master_weights_and_grads": False}
BF16 = {"enabled": (False, "bf16 OFF"), "immediate_grad_update": False, "check_grad_overflow": True,
        "bf16_master_weights_and_grads": False, "bf16_optimizer_states": False}
#: Other pydantic (extra="forbid") sections: "auto" is dropped too; default not tabulated here.
OTHER_VALIDATED = ("comms_logger", "tensorboard", "wandb", "csv_monitor", "comet", "hybrid_engine", "compile",
                   "tensor_parallel", "weight_quantization")


def _show(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


@register
class AutoInValidatedSection(Rule):
    code = "A002"
    name = "auto-in-validated-section"
    severity = "warning"

    def check(self, ctx: LintContext):
        if ctx.hf:
            return
        raw = ctx.raw
        stage = ctx.effective.zero.stage
        tables = [(("zero_optimization",), ZERO), (("zero_optimization", "offload_param"), OFFLOAD_PARAM),
                  (("zero_optimization", "offload_optimizer"), OFFLOAD_OPTIMIZER), (("fp16",), FP16),
                  (("bf16",), BF16), (("bfloat16",), BF16)]
        for path, table in tables:
            sec = raw
            for p in path:
                sec = sec.get(p) if isinstance(sec, dict) else None
            if not isinstance(sec, dict):
                continue
            dotted = ".".join(path)
            for k, v in sec.items():
                if not is_auto(v):
                    continue
                d = table.get(k, ...)
                if d is ...:
                    continue  # unknown key: the schema's finding
                if k == "overlap_comm":
                    d, note = stage == 3, f"the default at stage {stage}"
                elif isinstance(d, tuple):
                    d, note = d
                else:
                    note = "the default"
                yield self.finding(pointer(*path, k),
                                   f'{dotted}.{k} "auto" is silently dropped outside the HF Trainer: DeepSpeed uses '
                                   f"{_show(d)} ({note})",
                                   f"set {dotted}.{k} to the value you want (e.g. {_show(d)} to keep DeepSpeed's choice), "
                                   "or lint with --hf if the HF Trainer launches this config", default=d)
        for s in OTHER_VALIDATED:
            sec = raw.get(s)
            if isinstance(sec, dict):
                for k, v in sec.items():
                    if is_auto(v):
                        yield self.finding(pointer(s, k), f'{s}.{k} "auto" is silently dropped outside the HF Trainer: '
                                                          "DeepSpeed uses the field's default",
                                           f"set {s}.{k} to a real value or remove it")
