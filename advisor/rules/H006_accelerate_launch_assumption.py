"""H006 accelerate-launch-assumption: what an accelerate config leaves to the launch command.

Reported when reading an accelerate config file (``advisor.config.hf.read_accelerate_config``,
following accelerate 1.15.0 ``commands/launch.py`` ``_validate_launch_command``):

* ``compute_environment`` other than LOCAL_MACHINE: accelerate copies ``deepspeed_config`` onto
  the launch only for LOCAL_MACHINE (e.g. AMAZON_SAGEMAKER launches differently); the values are
  read as if it were local;
* no ``num_processes``: ``accelerate launch`` then takes ``--num_processes`` from its command
  line; the estimate assumes world size 1 unless ``--world-size`` is given;
* ``num_processes`` not a multiple of ``num_machines`` (a warning): ``accelerate launch`` starts
  ``num_processes // num_machines`` per machine (``utils/launch.py`` nproc_per_node / --num_gpus),
  so the world size is that times ``num_machines``, not ``num_processes``.

Anti-pattern::

    distributed_type: DEEPSPEED
    deepspeed_config: {zero_stage: 3}
    # no num_processes

Fix: set ``num_processes`` (all machines together) in the file, or pass ``--world-size N``.
"""

from __future__ import annotations

from advisor.rules import Rule, register


@register
class AccelerateLaunchAssumption(Rule):
    """Explanation and registry entry for H006; the findings come from the accelerate reader."""

    code = "H006"
    name = "accelerate-launch-assumption"
    severity = "info"
    produced_by = "advisor.config.hf.read_accelerate_config"

    def check(self, ctx):
        """Yield nothing: the accelerate reader reports H006 when it reads the file."""
        return iter(())
