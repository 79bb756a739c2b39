"""K101 nvme-without-path: NVMe offload is configured without ``nvme_path`` (pre-launch check).

``offload_optimizer.device: nvme`` or ``offload_param.device: nvme`` at ZeRO-3 needs a folder
on a local NVMe drive for its swap files; without one the swapper fails inside
``deepspeed.initialize`` (``os.path.join(None, ...)``).

Anti-pattern::

    "offload_param": {"device": "nvme"}

Fix::

    "offload_param": {"device": "nvme", "nvme_path": "/local_nvme"}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class NvmeWithoutPath(Rule):
    """Explanation and registry entry for K101; the findings come from check."""

    code = "K101"
    name = "nvme-without-path"
    produced_by = "check"
    severity = "error"

    def check(self, ctx: LintContext):
        return ()
