"""K112 bad-launch-variable: A launcher variable is set but malformed or out of bounds (pre-launch check).

``check`` reads the launch shape from WORLD_SIZE, RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
SLURM_NTASKS, SLURM_JOB_NUM_NODES, SLURM_NODEID and SLURM_GPUS_ON_NODE/PER_NODE. A value
that is not an integer in range (``WORLD_SIZE=abc``, ``WORLD_SIZE=1e23``, ``SLURM_NTASKS=-3``,
more than 2^20 ranks) is not used: the shape comes from the next source in line (another
variable, the visible devices, ``--hardware``, or 1), and this warning names the variable so
that the fallback is never silent. torchrun and Slurm would fail on the same value, or start
a different job than the batch sizes assume.

Fix: fix or unset the variable in the job script, or pass ``--world-size`` / ``--gpus-per-node``.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class BadLaunchVariable(Rule):
    """Explanation and registry entry for K112; the findings come from check."""

    code = "K112"
    name = "bad-launch-variable"
    produced_by = "check"
    severity = "warning"

    def check(self, ctx: LintContext):
        return ()
