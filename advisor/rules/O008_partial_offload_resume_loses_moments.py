"""O008 partial-offload-resume-loses-moments: a checkpoint resume restarts the accelerator sub-groups' moments.

What DeepSpeed does: with ZeRO-3 partial optimizer offload (Twin-Flow, ``offload_optimizer.ratio``
below 1) the first int((1 - ratio) x n) of a rank's n sub-groups stay on the GPU
(``runtime/zero/stage3.py`` l.1100-1108, ``subgroup_to_device``) and ``_optimizer_step``
(l.1249-1258) steps them with a backup ``torch.optim.AdamW`` built for this purpose (l.313-326),
not with DeepSpeedCPUAdam. Their Adam moments and step count live in that backup optimizer's
state. ``save_checkpoint`` writes the ZeRO optimizer's ``state_dict``, whose ``_rigid_state_dict``
(l.3442-3444) saves ``self.optimizer.state_dict()`` (DeepSpeedCPUAdam's, which holds only the
sub-groups it stepped: torch's ``Optimizer.state_dict`` packs ``self.state``) and every sub-group's
fp32 partition; ``_rigid_load_state_dict`` (l.3551-3552) loads that state into DeepSpeedCPUAdam
alone. The backup optimizer's state is neither saved nor loaded: after a resume the fp32 weights are
right, but the GPU sub-groups' exp_avg and exp_avg_sq start again from zero with step 1 (Adam's
bias correction restarts), so training does not continue as if uninterrupted. With the model and
the world size known the finding names how many sub-groups this hits; int() of a float can make it
none (ratio 0.7 over 3 sub-groups: int(0.9000000000000001) = 0), and then nothing is reported. On
DeepSpeed's CPU accelerator every sub-group maps to 'cpu' and nothing is lost; the finding is about
GPU runs. Releases before 0.12.3 have no ``ratio`` (O007 explains). With ``device: nvme`` the split
applies too (l.1100 maps every offloaded sub-group): a sub-group swapped to NVMe (l.1117) among the first
int((1 - ratio) x n) is stepped by the backup AdamW on its swapped-in host copy, its moments host tensors
in that optimizer's state, swapped by nothing (``swap_tensor/optimizer_utils.py`` _get_state_tensors
l.492-502 reads DeepSpeedCPUAdam's state) and saved by nothing: the checkpoint's ``offloaded_tensors``
hold its master's swap file only.

Anti-pattern::

    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}

Fix: offload every sub-group (ratio 1) so DeepSpeedCPUAdam steps and saves all the moments, or
accept that a resume restarts the GPU sub-groups' moments::

    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.0}}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zero3_partial_offload_ratio, zptr

SOURCE = "stage3.py _optimizer_step l.1249-1258, _rigid_state_dict l.3442-3444, _rigid_load_state_dict l.3551-3552"


@register
class PartialOffloadResumeLosesMoments(Rule):
    code = "O008"
    reads_stage = True
    name = "partial-offload-resume-loses-moments"
    severity = "warning"

    def check(self, ctx: LintContext):
        ec = ctx.effective
        z = ec.zero
        r = zero3_partial_offload_ratio(ctx, ("cpu", "nvme"))
        if r is None:
            return
        # lazily: lint of other configs never loads the ledger
        from advisor.ledger.state import twin_flow_backup_stepped, zero3_sub_groups
        which = f"the first int((1 - {r:g}) x n) of each rank's n sub-groups"
        data: dict = {}
        if ctx.inventory is not None and ctx.dp_world_size:
            sgs = zero3_sub_groups(ctx.inventory, ctx.dp_world_size, z.sub_group_size)
            cut = twin_flow_backup_stepped(ec, len(sgs))
            if cut == 0:
                return  # every sub-group is DeepSpeedCPUAdam's: the file holds all the moments
            elems = sum(sg.numel for sg in sgs[:cut])
            which = (f"the first {cut} of each rank's {len(sgs)} sub-groups ({elems:,} elements per rank at "
                     f"world size {ctx.dp_world_size})")
            data = dict(gpu_sub_groups=cut, sub_groups=len(sgs), gpu_elements=elems)
        yield self.finding(
            zptr("offload_optimizer", "ratio"),
            f"offload_optimizer.ratio {r:g} (partial offload): {which} are stepped by a backup torch AdamW "
            + ("(on the GPU, or for a sub-group swapped to NVMe on its host copy) " if ec.offload_optimizer_effective == "nvme"
               else "on the GPU ")
            + "whose moments save_checkpoint does not write (only DeepSpeedCPUAdam's state is saved and "
            f"loaded: {SOURCE}); a resume restarts their exp_avg, exp_avg_sq and step from zero",
            "set zero_optimization.offload_optimizer.ratio to 1 (every sub-group on DeepSpeedCPUAdam, all moments "
            "saved), or accept that a resume restarts the GPU sub-groups' optimizer moments",
            set=["zero_optimization.offload_optimizer.ratio=1"], **data)
