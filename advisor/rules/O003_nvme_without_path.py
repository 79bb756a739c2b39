"""O003 nvme-without-path: NVMe offload with no nvme_path.

What DeepSpeed does: ``offload_param``/``offload_optimizer`` with ``device: "nvme"`` need
``nvme_path``, the directory where the swap files go. The config classes do not check it
(``nvme_path`` defaults to None); the swappers later build the folder with
``os.path.join(nvme_path, "zero_stage_3", ...)`` and fail with ``TypeError`` deep inside
``deepspeed.initialize`` (``swap_tensor/partitioned_param_swapper.py``,
``zero/stage3.py`` ``_configure_tensor_swapping``), after the model has been built.

Under ``accelerate launch`` without ``offload_*_nvme_path`` the path is accelerate's placeholder,
the string ``"none"`` (accelerate/utils/dataclasses.py ``DeepSpeedPlugin.__post_init__``:
``os.environ.get("ACCELERATE_DEEPSPEED_OFFLOAD_*_NVME_PATH", "none")``, written into the DeepSpeed
config it builds): DeepSpeed then swaps into a folder named ``none`` under the launch's working
directory, on whatever drive that is (DeepSpeed 0.19.8 ``zero/offload_config.py`` reads it as
``Path("none")``; ``partitioned_param_swapper.py`` ``os.makedirs`` the folder): a warning, not a
refusal, so estimate and check still judge the job. Reported here, by ``lint`` as well as ``check`` (check's
K102 does not repeat it): one fault, one finding.

Reported where NVMe is actually used: ZeRO stage 3 (at stages 1-2 optimizer "nvme" is plain CPU
offload, see O004; offload_param below stage 3 is ignored, see O001).

Anti-pattern::

    "offload_optimizer": {"device": "nvme"}

Fix: point it at a local NVMe mount with room for the swap files::

    "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zero_raw, zptr


@register
class NvmeWithoutPath(Rule):
    code = "O003"
    reads_stage = True
    name = "nvme-without-path"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        z = ctx.effective.zero
        if z.stage != 3:
            return
        zr = zero_raw(ctx.raw)
        for block, cfg in (("offload_param", z.offload_param), ("offload_optimizer", z.offload_optimizer)):
            if cfg.device != "nvme" or not nvme_path_unset(cfg.nvme_path):
                continue
            b = zr.get(block) if isinstance(zr.get(block), dict) else {}
            ptr = zptr(block, "nvme_path") if "nvme_path" in b else zptr(block, "device")
            severity = None
            if cfg.nvme_path == ACCELERATE_NO_PATH:
                # not a refusal: offload_config.py reads it as Path("none") and the swapper makedirs it
                severity = "warning"
                what = (f'{block}.device is nvme and nvme_path is "none", accelerate\'s placeholder for no '
                        f"--{block}_nvme_path: DeepSpeed accepts it and swaps into a folder named none under "
                        "the launch's working directory, not onto an NVMe drive")
            else:
                what = (f"{block}.device is nvme but nvme_path is not set: deepspeed.initialize fails "
                        "(TypeError joining a None path) when it creates the swap folder")
            yield self.finding(ptr, what,
                               f'add "nvme_path": "/local_nvme" (a local NVMe mount) to zero_optimization.{block}, '
                               'or use "device": "cpu"', **({"severity": severity} if severity else {}))


#: What accelerate's DeepSpeedPlugin writes as nvme_path when none is given
#: (accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__).
ACCELERATE_NO_PATH = "none"


def nvme_path_unset(path) -> bool:
    """True when an nvme_path names no swap folder: None, blank, or accelerate's ``"none"``
    placeholder. The one test O003 and check's nvme_path probe (K102) share."""
    return not (isinstance(path, str) and path.strip()) or path == ACCELERATE_NO_PATH
