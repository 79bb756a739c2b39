"""O010 super-offload-with-nvme: SuperOffload with an NVMe offload completes no step.

What DeepSpeed does: ``offload_optimizer.super_offload`` at ZeRO-3 makes ``engine.py`` (l.2748-2750)
build ``SuperOffloadOptimizer_Stage3`` whatever ``offload_optimizer.device`` / ``offload_param.device``
say, and nothing in the config refuses NVMe beside it (``offload_config.py`` l.102: a plain bool). But
its overrides assume every sub-group is held in host memory:

* ``offload_optimizer: nvme``: a swappable sub-group (S x 4 >= max(1 MiB, ``aio.block_size``),
  ``stage3.py`` ``_swappable_optimizer_subgroup`` l.1264-1269) has an empty fp32 partition
  (l.1117-1118) whose ``.grad`` is None between steps (``_optimizer_states_and_gradient_swap_out``
  l.2781). SuperOffload's ``partition_grads`` replaces stage3's (which swaps the boundary's fp32
  gradients out, ``_offload_grad_partition_at_boundary``) and writes every gradient into
  ``fp32_partitioned_groups_flat[i].grad.narrow(...)`` (``superoffload_stage3.py`` l.158-160) at the
  accumulation boundary, with or without clipping: ``AttributeError: 'NoneType' object has no attribute
  'narrow'`` in the first boundary's backward.
* ``offload_param: nvme`` (the optimizer on the CPU): a sub-group past the ``max_in_cpu`` flat buffer
  has no 16-bit flat partition (``stage3.py`` l.984-998: ``fp16_partitioned_group_flat = None``).
  stage3's ``_reassign_or_swap_out_partitioned_parameters`` swaps such a sub-group out (l.2854-2864);
  SuperOffload's override copies into it for every host sub-group without that check
  (``superoffload_stage3.py`` l.116-121): ``AttributeError: 'NoneType' object has no attribute 'data'``
  in the first step. Where the stop comes depends on the accelerator: a model not built under
  ``zero.Init`` is converted by ``Init(dtype=<its parameters' dtype>)`` (``parameter_offload.py`` l.167,
  l.270-272), and ``_set_dtype`` (``partition_parameters.py`` l.409-410) keeps that dtype only where
  ``get_accelerator().is_fp16_supported()`` (a CUDA GPU of compute capability >= 7,
  ``cuda_accelerator.py`` l.209-217), else takes bf16 -- DeepSpeed's CPU accelerator where torch's mkldnn
  has no fp16 (``cpu_accelerator.py`` l.228-233; this project's AMD EPYC). There the NVMe parameter
  swapper is built for bf16 (l.1174) and a model not in bf16 stops earlier, in the first forward
  (``zero/linear.py`` l.90: Float and BFloat16 operands). Either way no step completes, which is what
  the rule says; it names the step's line as the stop where the accelerator has fp16.

Measured on DeepSpeed 0.19.8's CPU engine with SuperOffload's CUDA assert (l.20-24) and the CPU
accelerator's missing stream patched out (``tests/engine/test_superoffload_nvme_engine.py``): the two
crashes at those lines (the second on a CPU with mkldnn fp16; without it, the forward's stop above), and the same model trains with both offloads on the CPU. With the model and
the world size the rule checks the sub-groups (``advisor.ledger.state.zero3_sub_groups``, the
ledger's swap size and ``max_in_cpu`` placement) and is silent where none is swapped / all fit the
buffer; without them it flags an NVMe optimizer (any sub-group of 262,144 fp32 elements is swapped) and
``max_in_cpu`` 0, and is silent on other ``offload_param`` NVMe configs. estimate, check and generate
give no estimate for a config it flags (``refuses``). A sub-group on the accelerator under
``offload_optimizer.ratio`` < 1 takes stage3's paths and is not counted.

Anti-pattern::

    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme",
                                                            "super_offload": true}}

Fix: SuperOffload keeps the optimizer in host memory: ``offload_optimizer.device: cpu`` (and, with
``offload_param: nvme``, a ``max_in_cpu`` that holds every sub-group -- with the model and W the finding
gives the least, the sum of the partitions up to the last host sub-group's end, ``stage3.py`` l.888-900
and l.984-987 -- or ``offload_param.device: cpu``), each without the NVMe-only keys (``nvme_path``...)
that device cpu does not read (O005); or drop ``super_offload`` to swap to NVMe::

    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true}}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import offload_switch_set, zptr

SOURCE_OPT = ("superoffload_stage3.py l.158-160 partition_grads writes fp32_partitioned_groups_flat[i].grad, None for a "
              "swapped sub-group (stage3.py l.1117-1118, l.2781)")
SOURCE_PARAM = ("superoffload_stage3.py l.116-121 copies into fp16_partitioned_groups_flat[i], None past max_in_cpu "
                "(stage3.py l.984-998), where stage3.py l.2854-2864 swaps it out instead")
SOURCE_PARAM_DTYPE = ("partition_parameters.py l.409-410 gives the NVMe parameter swapper bf16 where "
                      "is_fp16_supported() is False, e.g. DeepSpeed's CPU accelerator without mkldnn fp16: a model not "
                      "in bf16 stops in the first forward, zero/linear.py l.90")


@register
class SuperOffloadWithNvme(Rule):
    code = "O010"
    reads_stage = True
    name = "super-offload-with-nvme"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        ec = ctx.effective
        z = ec.zero
        if z.stage != 3 or not z.offload_optimizer.super_offload:
            return
        oo, op = ec.offload_optimizer_effective, ec.offload_param_effective
        if oo not in ("cpu", "nvme"):
            return
        if oo == "nvme":
            yield from self._optimizer(ctx)
        elif op == "nvme":
            yield from self._params(ctx)

    def _sub_groups(self, ctx: LintContext):
        """(sub-groups, per sub-group on the host under a ratio) with the model and W, else None."""
        if ctx.inventory is None or not ctx.dp_world_size:
            return None
        from advisor.ledger.state import twin_flow_on_accelerator, zero3_sub_groups
        ec = ctx.effective
        sgs = zero3_sub_groups(ctx.inventory, ctx.dp_world_size, ec.zero.sub_group_size)
        return sgs, [not a for a in twin_flow_on_accelerator(ec, len(sgs))]

    def _optimizer(self, ctx: LintContext):
        from advisor.ledger.state import swap_threshold_bytes
        smin = swap_threshold_bytes(ctx.effective)
        got = self._sub_groups(ctx)
        if got is not None:
            sgs, _ = got
            k = sum(1 for sg in sgs if sg.numel * 4 >= smin)  # swappable whatever the ratio maps (l.1117)
            if not k:
                return
            which = f"{k} of each rank's {len(sgs)} sub-group(s) {'is' if k == 1 else 'are'} swapped to NVMe"
        else:
            which = f"every sub-group of S x 4 >= {smin:,} B is swapped to NVMe"
        # the fix moves the optimizer to the CPU without its NVMe-only keys (nvme_path..., O005); with
        # offload_param nvme past max_in_cpu the params check would then fire: that block moves too
        devices = {"offload_optimizer": "cpu"}
        also = ""
        if ctx.effective.offload_param_effective == "nvme" and any(True for _ in self._params(ctx)):
            devices["offload_param"] = "cpu"
            also = (" and offload_param.device to cpu (SuperOffload also fails on parameters past max_in_cpu, "
                    "below)")
        yield self.finding(
            zptr("offload_optimizer", "super_offload"),
            f"SuperOffload with offload_optimizer device nvme stops in the first accumulation boundary's backward: "
            f"{which}, its fp32 partition empty and its .grad None, and SuperOffload's partition_grads writes the "
            f"gradients into that .grad ({SOURCE_OPT}): AttributeError: 'NoneType' object has no attribute 'narrow'",
            f"set zero_optimization.offload_optimizer.device to cpu (SuperOffload steps host-resident sub-groups){also}, "
            "removing the NVMe-only keys (nvme_path...), or drop offload_optimizer.super_offload to swap the "
            "optimizer to NVMe",
            set=offload_switch_set(ctx, devices))

    def _params(self, ctx: LintContext):
        ec = ctx.effective
        cap = ec.zero.offload_param.max_in_cpu
        got = self._sub_groups(ctx)
        need = "the rank's parameter partitions"
        data: dict = {}
        if got is not None:
            from advisor.ledger.state import _zero3_in_flat, zero3_max_in_cpu_needed
            sgs, host = got
            out = [not f and h and sg.numel > 0 for sg, f, h in zip(sgs, _zero3_in_flat(ec, sgs), host)]
            k = sum(out)
            if not k:
                return
            which = (f"{k} of each rank's {len(sgs)} sub-group(s) {'lies' if k == 1 else 'lie'} past the max_in_cpu "
                     f"buffer ({cap:,} elements)")
            n_need = zero3_max_in_cpu_needed(sgs, [h for h in host])
            need = f"{n_need:,} elements"
            data["max_in_cpu_needed"] = n_need
        elif cap <= 0:
            which = "max_in_cpu 0 leaves every sub-group without a host flat buffer"
        else:
            return  # which sub-groups fit max_in_cpu is unknown without the model and the world size
        yield self.finding(
            zptr("offload_optimizer", "super_offload"),
            f"SuperOffload with offload_param device nvme completes no step: {which}, its 16-bit flat partition "
            f"None, and SuperOffload copies the updated parameters into it ({SOURCE_PARAM}): AttributeError: "
            f"'NoneType' object has no attribute 'data' in the first step where the accelerator has fp16; where it "
            f"has none the run stops earlier ({SOURCE_PARAM_DTYPE})",
            f"set zero_optimization.offload_param.max_in_cpu to at least {need} (every host sub-group in the host "
            "buffer, stage3.py l.888-900, l.984-987), or offload_param.device to cpu removing its NVMe-only keys "
            "(nvme_path...), or drop offload_optimizer.super_offload",
            set=offload_switch_set(ctx, {"offload_param": "cpu"}), **data)
