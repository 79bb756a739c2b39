"""``generate --hf`` -> ``resolve --hf`` reads the workload sidecar, as estimate --hf and check --hf do (fixj23).

generate --hf writes "auto" for the batch keys and the precision and records the Trainer arguments
its plan assumed in the sidecar (``trainer``). resolve must fill the "auto" keys from them where no
flag gives them (advisor.views.workload.trainer_args_for, the function estimate and check use), not
from TrainingArguments' defaults (per-device batch 8, GA 1, no bf16). The expected values are
transformers' own ``HfTrainerDeepSpeedConfig.trainer_config_process`` on those arguments.
"""

from __future__ import annotations

import copy
import json

from tests.conftest import run_cli, run_json
from tests.test_hf import _ns


def _generate(tmp_path):
    out = tmp_path / "g6.json"
    rc, g = run_json(["generate", "--model", "qwen2.5-7b", "--hardware", "dgx-h100", "--global-batch", "96",
                      "--seq-len", "4096", "--hf", "-o", str(out), "--format", "json"])
    assert rc == 0, g
    return out


def _transformers_fill(raw: dict, world: int, trainer: dict) -> dict:
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    ns, _ = _ns(world_size=world, fp16=False, **trainer)
    c = HfTrainerDeepSpeedConfig(copy.deepcopy(raw))
    c.trainer_config_process(ns)
    return c.config


def _batch_and_bf16(cfg: dict) -> tuple:
    return (cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"], cfg["train_batch_size"],
            cfg["bf16"]["enabled"])


def test_resolve_hf_fills_the_sidecars_trainer_arguments(tmp_path):
    cfg = _generate(tmp_path)
    raw = json.loads(cfg.read_text())
    trainer = json.loads((tmp_path / "g6.workload.json").read_text())["trainer"]
    assert set(trainer) == {"per_device_train_batch_size", "gradient_accumulation_steps", "bf16"}, trainer
    for world in (8, 1):  # dgx-h100's 8 ranks (the plan's: train_batch_size is --global-batch 96), and the default
        p = run_cli(["resolve", "--hf", str(cfg), "--model", "qwen2.5-7b", "--world-size", str(world)])
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout)
        want = _transformers_fill(raw, world, trainer)
        assert _batch_and_bf16(got) == _batch_and_bf16(want), (p.stderr, trainer)
        assert "from g6.workload.json" in p.stderr and "gradient_accumulation_steps=" in p.stderr, p.stderr
        if world == 8:
            assert got["train_batch_size"] == 96 and got["bf16"]["enabled"] is True
    # a flag still wins over the sidecar (the rest the sidecar's)
    p = run_cli(["resolve", "--hf", str(cfg), "--model", "qwen2.5-7b", "--world-size", "8",
                 "--per-device-train-batch-size", "3"])
    got = json.loads(p.stdout)
    want = _transformers_fill(raw, 8, dict(trainer, per_device_train_batch_size=3))
    assert _batch_and_bf16(got) == _batch_and_bf16(want) and got["train_micro_batch_size_per_gpu"] == 3
