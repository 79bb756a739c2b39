"""O005 offload-settings-no-effect: offload and aio settings that cannot take effect.

What DeepSpeed does (0.19.8, ``runtime/zero/offload_config.py``, ``zero/stage3.py``
``_configure_offloading``/``_configure_tensor_swapping``, ``swap_tensor/*``):

* ``device: "none"`` (the default): the block is parsed and nothing else in it is read
  (``pin_memory``, ``buffer_count``, ``nvme_path``... have no effect);
* ``device: "cpu"``: only ``pin_memory`` (and for the optimizer ``ratio``, ``super_offload``,
  ``cpuadam_cores_perc``) matter; ``super_offload`` only at stage 3 (``engine.py`` l.2748-2750) and
  ``cpuadam_cores_perc`` only with it (``superoffload_stage3.py`` l.57). ``nvme_path``, ``buffer_count``, ``buffer_size``,
  ``max_in_cpu``, ``pipeline_read``/``pipeline_write`` and ``fast_init`` belong to NVMe
  swapping and are not read. ``nvme_path`` with ``device: "cpu"`` is a warning: it usually means
  the user believes state goes to NVMe while it fills host memory;
* the top-level ``aio`` section is read only by the NVMe swappers (ZeRO-3 with a ``device:
  "nvme"`` block, or DeepNVMe checkpointing); without them it has no effect.

Blocks that are ignored as a whole are reported by O001 (offload_param below stage 3) and O002
(offload_optimizer at stage 0) instead.

Anti-pattern::

    "offload_optimizer": {"device": "cpu", "nvme_path": "/local_nvme", "buffer_count": 4}

Fix: either switch to NVMe (ZeRO-3) or delete the NVMe-only keys::

    "offload_optimizer": {"device": "cpu", "pin_memory": true}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import NVME_ONLY, is_auto, zero_raw, zptr


#: SuperOffload's keys (``offload_config.py`` l.102-106).
SUPER_OFFLOAD_KEYS = ("super_offload", "cpuadam_cores_perc")


def superoffload_no_effect(z, key: str, value) -> str | None:
    """Why a SuperOffload key of ``offload_optimizer`` (device cpu) has no effect, or None: ``engine.py``
    l.2748-2750 builds SuperOffloadOptimizer_Stage3 only in the ZeRO-3 branch, so below stage 3 neither key
    is read (``super_offload`` false is the default and says nothing); ``cpuadam_cores_perc`` is read only
    by SuperOffload's worker (``superoffload_stage3.py`` l.57 -> ``superoffload_utils.py`` _set_cpu_affinity),
    so without ``super_offload`` it is not used."""
    if z.stage != 3:
        if key == "super_offload" and value is not True:
            return None
        return (f"SuperOffload runs only at ZeRO stage 3 (engine.py builds SuperOffloadOptimizer_Stage3 in the "
                f"stage-3 branch); this is stage {z.stage}")
    if key == "cpuadam_cores_perc" and not z.offload_optimizer.super_offload:
        return "only SuperOffload's CPU Adam worker reads it, and offload_optimizer.super_offload is off"
    return None


@register
class OffloadSettingsNoEffect(Rule):
    code = "O005"
    reads_stage = True
    name = "offload-settings-no-effect"
    severity = "info"

    def check(self, ctx: LintContext):
        ec = ctx.effective
        z = ec.zero
        zr = zero_raw(ctx.raw)
        live = {"offload_param": z.stage == 3, "offload_optimizer": z.stage == 3 or
                (z.stage in (1, 2) and z.offload_optimizer.device != "nvme")}
        for block, cfg in (("offload_param", z.offload_param), ("offload_optimizer", z.offload_optimizer)):
            b = zr.get(block)
            if not isinstance(b, dict) or not live[block]:
                continue
            dev = cfg.device
            for k, v in b.items():
                if k == "device" or is_auto(v):
                    continue
                if dev == "none":
                    yield self.finding(zptr(block, k), f"{block}.{k} has no effect: {block}.device is \"none\" "
                                                       "(nothing is offloaded)",
                                       f"remove {block}.{k}, or set {block}.device to \"cpu\" if you meant to offload")
                elif dev == "cpu" and k in NVME_ONLY[block]:
                    if k == "nvme_path":
                        yield self.finding(zptr(block, k), f"{block}.nvme_path is set but device is \"cpu\": the "
                                                           "state goes to host memory, not to NVMe",
                                           f"remove {block}.nvme_path, or set {block}.device to \"nvme\""
                                           + ("" if z.stage == 3 else " and zero_optimization.stage to 3"),
                                           severity="warning")
                    else:
                        yield self.finding(zptr(block, k), f"{block}.{k} only applies to NVMe offload; device is "
                                                           "\"cpu\"", f"remove {block}.{k}")
                elif dev == "cpu" and block == "offload_optimizer" and k in SUPER_OFFLOAD_KEYS:
                    why = superoffload_no_effect(z, k, v)
                    if why:
                        yield self.finding(zptr(block, k), f"{block}.{k} has no effect: {why}", f"remove {block}.{k}")
        if isinstance(ctx.raw.get("aio"), dict) and ctx.raw["aio"]:
            nvme = z.stage == 3 and "nvme" in (z.offload_param.device, z.offload_optimizer.device)
            if not nvme:
                yield self.finding("/aio", "the aio section is only used by ZeRO-3 NVMe offload; this config does "
                                           "not offload to NVMe, so it has no effect",
                                   "remove the aio section (or keep it only if you use DeepNVMe checkpointing)")
