"""H010 accelerate-unknown-key: a top-level key of an accelerate config file that accelerate refuses.

What accelerate does: ``accelerate launch --config_file`` reads the file with
``load_config_from_file`` (accelerate 1.15.0, same in 1.16.0: accelerate/commands/config/config_args.py),
which picks ClusterConfig when compute_environment is LOCAL_MACHINE or absent, else
SageMakerConfig. Its from_yaml_file / from_json_file (about line 134 and line 150) compare the
file's keys with that dataclass's fields and raise ValueError "The config file at ... had unknown
keys ([...])" for any other key, before a process starts. DeepSpeed never sees the config.

The known keys are the fields of BaseConfig (compute_environment, distributed_type,
mixed_precision, use_cpu, debug) and of the chosen class, plus the legacy fp16 and dynamo_backend
that process_config converts first (advisor.config.hf ACCELERATE_CLUSTER_KEYS /
ACCELERATE_SAGEMAKER_KEYS). The message suggests the closest known key, or says which other class
knows it (a SageMaker field in a LOCAL_MACHINE file). Keys inside deepspeed_config are not
checked by accelerate at this point.

Anti-pattern::

    distributed_type: DEEPSPEED
    num_proceses: 8
    deepspeed_config: {zero_stage: 2}

Fix: rename the key to the one accelerate knows (num_processes), or remove it.
"""

from __future__ import annotations

from advisor.rules import Rule, register


@register
class AccelerateUnknownKey(Rule):
    """Explanation and registry entry for H010; the findings come from the accelerate reader."""

    code = "H010"
    name = "accelerate-unknown-key"
    severity = "error"
    refuses = True
    produced_by = "advisor.config.hf.read_accelerate_config"

    def check(self, ctx):
        """Yield nothing: the accelerate reader reports H010 when it reads the file."""
        return iter(())
