"""K106 nvme-stale-swap-files: ``nvme_path`` holds swap files an earlier run left; counted as free space.

A run that was killed leaves DeepSpeed's swap files under ``nvme_path/zero_stage_3``:
``optimizer/rank{r}/*.tensor.swp`` and ``{dtype}params/rank{r}/*.tensor.swp``.
The filesystem counts them as used, but the next run
of this node's ranks frees that space itself: the parameter swapper empties its folder when it
starts (``partitioned_param_swapper.py`` l.88, ``shutil.rmtree``) and the optimizer swapper
rewrites its files by name (``optimizer_utils.py`` l.33, ``{param id}.tensor.swp``). So check
adds their allocated bytes to the free space K104 compares the need with, and says so.

The optimizer's files are rewritten by name only: for the same model and ZeRO layout every old
file is overwritten; a different model can leave some behind, which are still counted here.

Fix: nothing for a rerun of the same job; before running another model, delete the folder.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class NvmeStaleSwapFiles(Rule):
    """Explanation and registry entry for K106; the findings come from check."""

    code = "K106"
    name = "nvme-stale-swap-files"
    produced_by = "check"
    severity = "info"

    def check(self, ctx: LintContext):
        return ()
