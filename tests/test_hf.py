"""advisor.config.hf against transformers' and accelerate's own code (run on CPU, no model loaded).

The expected configs are computed by transformers' ``HfTrainerDeepSpeedConfig`` and accelerate's
``DeepSpeedPlugin`` themselves, fed a stand-in TrainingArguments (SimpleNamespace carrying the
fields they read, with TrainingArguments' real ``get_warmup_steps`` bound to it) and a stand-in
model whose ``config`` has ``hidden_size``. Skipped where transformers/accelerate are missing.
"""

from __future__ import annotations

import copy
import json
import math
import re
import types
from pathlib import Path

import pytest

from advisor.config import hf
from advisor.config.effective import effective_config
from advisor.model.inventory import from_param_count

from tests.conftest import CORPUS  # noqa: E402  (tests/data/corpus)

ARGS = dict(world_size=16, per_device_train_batch_size=2, gradient_accumulation_steps=8, max_grad_norm=0.7,
            learning_rate=3e-5, adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-6, weight_decay=0.1,
            warmup_steps=0.03, max_steps=1200, bf16=True, fp16=False)
HIDDEN = 5120  # llama-2-13b


def _json_auto_configs():
    """Corpus configs with "auto" that transformers can read (it uses json.load)."""
    out = []
    for p in sorted(CORPUS.glob("*")):
        if p.suffix not in (".json", ".conf"):
            continue
        try:
            d = json.loads(p.read_text())
        except ValueError:
            continue
        if isinstance(d, dict) and '"auto"' in json.dumps(d):
            out.append(p)
    return out


CONFIGS = _json_auto_configs()


def _ns(**over):
    """A stand-in TrainingArguments with the fields trainer_config_process/finalize read."""
    from transformers import TrainingArguments

    a = dict(ARGS, **over)
    ns = types.SimpleNamespace(fp16_full_eval=False, bf16_full_eval=False, save_on_each_node=False,
                               **{k: v for k, v in a.items() if k != "max_steps"})
    ns.get_warmup_steps = types.MethodType(TrainingArguments.get_warmup_steps, ns)
    return ns, a.get("max_steps")


def _model(hidden=HIDDEN):
    return types.SimpleNamespace(config=types.SimpleNamespace(hidden_size=hidden))


def _tf_fill(raw, **over):
    """transformers' own HfTrainerDeepSpeedConfig: process then finalize. (config, mismatch lines)."""
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    ns, steps = _ns(**over)
    c = HfTrainerDeepSpeedConfig(copy.deepcopy(raw))
    c.trainer_config_process(ns)
    try:
        c.trainer_config_finalize(ns, _model(), steps)
    except ValueError as e:
        return c.config, re.findall(r"^- (ds .*)$", str(e), re.M)
    return c.config, []


def test_corpus_has_hf_configs():
    names = {p.name for p in CONFIGS}
    for n in ("huggingface__transformers__tests__deepspeed__ds_config_zero2.json",
              "huggingface__transformers__tests__deepspeed__ds_config_zero3.json",
              "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json",
              "tatsu-lab__stanford_alpaca__configs__default_offload_opt_param.json"):
        assert n in names
    assert len(CONFIGS) >= 30


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name[:70])
def test_trainer_fill_equals_transformers(path):
    pytest.importorskip("transformers")
    raw = json.loads(path.read_text())
    want, want_mismatch = _tf_fill(raw)
    got, findings = hf.trainer_fill(raw, hf.TrainerArgs.from_mapping(ARGS), hidden_size=HIDDEN)
    assert got == want
    got_mismatch = [f.message.split(": the HF Trainer raises")[0] for f in findings if f.code == "H001"]
    assert got_mismatch == want_mismatch
    assert all(f.severity == "error" for f in findings if f.code == "H001")


def _real_pipeline(raw, mixed_precision, monkeypatch, **over):
    """transformers + accelerate, in the Trainer's order: process, DeepSpeedPlugin, set_mixed_precision,
    finalize (steps 1-4 of advisor.config.hf); returns (config, error lines or None)."""
    from accelerate.utils import DeepSpeedPlugin
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    for k in ("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "ACCELERATE_GRADIENT_CLIPPING", "ACCELERATE_DEEPSPEED_ZERO_STAGE",
              "ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_CONFIG_DS_FIELDS", "ACCELERATE_MIXED_PRECISION"):
        monkeypatch.delenv(k, raising=False)
    ns, steps = _ns(**over)
    c = HfTrainerDeepSpeedConfig(copy.deepcopy(raw))
    c.trainer_config_process(ns)
    plugin = DeepSpeedPlugin(hf_ds_config=c)
    plugin.set_mixed_precision(mixed_precision)
    try:
        c.trainer_config_finalize(ns, _model(), steps)
    except ValueError as e:
        return plugin.deepspeed_config, str(e)
    return plugin.deepspeed_config, None


@pytest.mark.parametrize("name", [
    "huggingface__transformers__tests__deepspeed__ds_config_zero2.json",
    "huggingface__transformers__tests__deepspeed__ds_config_zero3.json",
    "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json",
    "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z2_offload_config.json",
    "tatsu-lab__stanford_alpaca__configs__default_offload_opt_param.json",
    "lm-sys__FastChat__playground__deepspeed_config_s2.json",
    "NVlabs__VILA__scripts__zero2.json",
])
def test_full_resolution_equals_transformers_and_accelerate(name, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    raw = json.loads((CORPUS / name).read_text())
    want, err = _real_pipeline(raw, "bf16", monkeypatch)
    assert err is None
    res = hf.resolve_trainer(raw, hf.TrainerArgs.from_mapping(ARGS), hidden_size=HIDDEN)
    got = res.config
    # Step 5 (deepspeed_optim_sched) adds this key when the Trainer creates the optimizer:
    if "optimizer" not in raw:
        assert got["zero_allow_untested_optimizer"] is True
        if "zero_allow_untested_optimizer" not in raw:
            del got["zero_allow_untested_optimizer"]
    # Step 6 (_prepare_deepspeed) fills what is still "auto" after finalize: the stage-3 sizes of
    # a non-stage-3 config (accelerate computes them from hidden_size regardless of stage).
    left = dict(hf._walk_autos(want))
    for key in left:
        node, k = hf._Config(got).find_config_node(key)
        expect = {"zero_optimization.stage3_prefetch_bucket_size": int(0.9 * HIDDEN * HIDDEN),
                  "zero_optimization.stage3_param_persistence_threshold": 10 * HIDDEN}[key]
        assert node[k] == expect
        node[k] = "auto"
    assert got == want
    assert not res.unresolved and not [f for f in res.findings if f.severity == "error"]


def test_accelerate_fills_stage3_sizes_in_stage2_config():
    """hiyouga's stage-2 offload config has stage3_* keys? the VILA stage-2 one has reduce only;
    the numbers here are hand-computed: hidden 5120 -> 26214400, 23592960, 51200."""
    raw = {"train_micro_batch_size_per_gpu": "auto",
           "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                                 "stage3_param_persistence_threshold": "auto"}}
    res = hf.resolve_trainer(raw, hf.TrainerArgs(), hidden_size=5120)
    z = res.config["zero_optimization"]
    assert (z["reduce_bucket_size"], z["stage3_prefetch_bucket_size"], z["stage3_param_persistence_threshold"]) == \
           (26_214_400, 23_592_960, 51_200)
    assert res.filled["zero_optimization.reduce_bucket_size"][2].startswith("Trainer")
    assert res.filled["zero_optimization.stage3_prefetch_bucket_size"][2].startswith("accelerate")


@pytest.mark.parametrize("path", sorted(p for p in CORPUS.glob("*") if p.suffix != ".tsv" and "\"auto\"" in p.read_text()),
                         ids=lambda p: p.name[:70])
def test_every_auto_config_resolves_and_estimates(path):
    from advisor.views.estimate import estimate
    from advisor.model.inventory import Inventory, TensorSpec
    from advisor.ledger.state import Cluster, Plan
    from advisor.config.loading import load_config

    loaded = load_config(str(path))
    inv = Inventory(name="h5120", tensors=[TensorSpec("w", (5120, 5120)), TensorSpec("b", (5120,), group=1)],
                    meta={"hidden_size": HIDDEN})
    raw, findings = hf.resolve_for_estimate(loaded.data, ARGS, inv, world_size=16)
    left = dict(hf._walk_autos(raw))
    errors = {f.pointer for f in findings if f.code == "H002"}
    # Every "auto" left is one the real launch fails on, and says so.
    assert {hf._ptr(k) for k in left} <= errors, (left, [f.to_dict() for f in findings])
    assert all("\n" not in f.message and f.fix for f in findings)
    ec = effective_config(raw)
    if "zero_optimization" in raw:
        assert ec.zero.stage == raw["zero_optimization"]["stage"]
    if isinstance(loaded.data.get("train_batch_size"), str):
        assert ec.train_batch_size == raw["train_batch_size"] == 2 * 8 * 16
    loaded.data = raw
    result = estimate(Plan(effective_config(raw), inv, Cluster(world_size=16), loaded=loaded))
    if "unsupported" in result.sections:
        # The Trainer's arguments make the launch fail (e.g. --bf16 against an explicit
        # fp16 true): the replay says so with an error, and estimate refuses the config.
        assert any(f.severity == "error" for f in findings), result.sections["unsupported"]
        assert any(f.code == "M090" for f in result.findings)
        return
    assert result.roles and result.roles[0].ledger.total("accelerator") > 0


def test_mismatch_is_h001_error_naming_both_values():
    raw = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": "auto",
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": "auto"}},
           "zero_optimization": {"stage": 2}}
    args = hf.TrainerArgs.from_mapping(ARGS)
    _, findings = hf.resolve_for_estimate(raw, args, None, world_size=16)
    h = {f.pointer: f for f in findings if f.code == "H001"}
    assert set(h) == {"/train_micro_batch_size_per_gpu", "/optimizer/params/lr"}
    f = h["/train_micro_batch_size_per_gpu"]
    assert f.severity == "error"
    assert "train_micro_batch_size_per_gpu=4" in f.message and "per_device_train_batch_size=2" in f.message
    assert "lr=0.0001" in h["/optimizer/params/lr"].message and "learning_rate=3e-05" in h["/optimizer/params/lr"].message
    assert f.data["config"] == 4 and f.data["trainer"] == 2
    if pytest.importorskip("transformers"):
        _, lines = _tf_fill(raw)
        assert lines == ["ds train_micro_batch_size_per_gpu=4 vs hf per_device_train_batch_size=2",
                         "ds optimizer.params.lr=0.0001 vs hf learning_rate=3e-05"]


def test_plain_hf_lint_reports_only_argument_independent_findings():
    from advisor.views.lint import lint_config
    from advisor.config.loading import parse_text

    cfg = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3, "stage3_max_live_parameters": "auto"}}
    loaded = parse_text(json.dumps(cfg, indent=1), "x.json")
    codes = {f.code for f in lint_config(loaded, hf=True) if f.code.startswith("H")}
    # H008 (ZeRO-3 save_model without the 16-bit gather) holds whatever the Trainer arguments are
    assert codes == {"H002", "H008"}
    got = [f for f in lint_config(loaded, hf={"per_device_train_batch_size": 8}) if f.code == "H001"]
    assert len(got) == 1 and got[0].line == 2


YAML = """\
compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  gradient_accumulation_steps: 8
  gradient_clipping: 0.7
  offload_optimizer_device: cpu
  offload_param_device: cpu
  zero3_init_flag: true
  zero3_save_16bit_model: true
  zero_stage: 3
distributed_type: DEEPSPEED
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 2
num_processes: 16
rdzv_backend: static
same_network: true
use_cpu: false
"""


def test_accelerate_yaml_equals_accelerate(tmp_path, monkeypatch):
    pytest.importorskip("yaml")
    p = tmp_path / "accel.yaml"
    p.write_text(YAML)
    launch = hf.read_accelerate_config(str(p))
    assert launch.num_processes == 16 and launch.mixed_precision == "bf16" and launch.plugin.zero_stage == 3
    res = hf.resolve_accelerate(launch, hf.TrainerArgs.from_mapping(ARGS), hidden_size=HIDDEN)
    assert res.world_size == 16 and res.zero3_init is True
    assert not [f for f in res.findings if f.severity == "error"], [f.to_dict() for f in res.findings]
    z = res.config["zero_optimization"]
    assert z["stage"] == 3 and z["offload_optimizer"]["device"] == "cpu" and z["offload_param"]["device"] == "cpu"
    assert res.config["train_batch_size"] == 2 * 8 * 16 and res.config["bf16"] == {"enabled": True}
    assert not res.unresolved

    pytest.importorskip("accelerate")
    pytest.importorskip("transformers")
    from accelerate.utils import DeepSpeedPlugin
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    # What accelerate/utils/launch.py prepare_deepspeed_cmd_env exports for this YAML.
    for k in ("ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH",
              "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH"):
        monkeypatch.delenv(k, raising=False)
    env = {"ACCELERATE_MIXED_PRECISION": "bf16", "ACCELERATE_USE_DEEPSPEED": "true",
           "ACCELERATE_CONFIG_DS_FIELDS": "gradient_accumulation_steps,gradient_clipping,offload_optimizer_device,"
                                          "offload_param_device,zero3_init_flag,zero3_save_16bit_model,zero_stage,"
                                          "mixed_precision",
           "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "8",
           "ACCELERATE_GRADIENT_CLIPPING": "0.7", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu",
           "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "cpu", "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true",
           "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    plugin = DeepSpeedPlugin()
    plugin.set_mixed_precision("bf16")
    c = HfTrainerDeepSpeedConfig(plugin.deepspeed_config)  # propagate_args_to_deepspeed
    ns, steps = _ns()
    c.trainer_config_process(ns)
    c.trainer_config_finalize(ns, _model(), steps)
    want = c.config
    got = copy.deepcopy(res.config)
    assert got.pop("zero_allow_untested_optimizer") is True  # no optimizer section: the Trainer's own
    assert got == want
    assert plugin.zero3_init_flag is True


def test_accelerate_yaml_with_config_file_and_fields_is_h004(tmp_path, monkeypatch):
    pytest.importorskip("yaml")
    monkeypatch.chdir(tmp_path)  # accelerate opens deepspeed_config_file relative to the launch's cwd
    ds = tmp_path / "ds.json"
    ds.write_text((CORPUS / "huggingface__transformers__tests__deepspeed__ds_config_zero3.json").read_text())
    p = tmp_path / "accel.yaml"
    p.write_text("distributed_type: DEEPSPEED\nnum_processes: 8\nmixed_precision: bf16\n"
                 "deepspeed_config:\n  deepspeed_config_file: ds.json\n  zero_stage: 3\n")
    launch = hf.read_accelerate_config(str(p))
    assert launch.deepspeed_config_file == "ds.json"
    res = hf.resolve_accelerate(launch, hf.TrainerArgs.from_mapping(ARGS), hidden_size=HIDDEN)
    h4 = [f for f in res.findings if f.code == "H004"]
    assert h4 and h4[0].data["fields"] == ["zero_stage", "mixed_precision"]
    assert res.world_size == 8 and res.config["train_batch_size"] == 8 * 2 * 8

    pytest.importorskip("accelerate")
    from accelerate.utils import DeepSpeedPlugin

    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(ds))
    monkeypatch.setenv("ACCELERATE_CONFIG_DS_FIELDS", "deepspeed_config_file,zero_stage,mixed_precision")
    with pytest.raises(ValueError, match="will be ignored"):
        DeepSpeedPlugin()


def test_cli_resolve_detects_accelerate_yaml(tmp_path):
    pytest.importorskip("yaml")
    from click.testing import CliRunner

    from advisor.cli import main

    p = tmp_path / "accel.yaml"
    p.write_text(YAML)
    r = CliRunner().invoke(main, ["resolve", str(p), "--per-device-train-batch-size", "2", "--hidden-size", "5120",
                                  "--gradient-accumulation-steps", "8", "--max-steps", "100", "--bf16"])
    # The YAML's gradient_clipping 0.7 against the Trainer's default max_grad_norm 1.0: H001, exit 1.
    assert r.exit_code == 1 and "H001" in r.stderr and "gradient_clipping=0.7" in r.stderr
    r = CliRunner().invoke(main, ["resolve", str(p), "--per-device-train-batch-size", "2", "--hidden-size", "5120",
                                  "--gradient-accumulation-steps", "8", "--max-steps", "100", "--bf16",
                                  "--max-grad-norm", "0.7"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["train_batch_size"] == 256 and out["zero_optimization"]["stage"] == 3
    assert out["steps_per_print"] == (1 << 63) - 1  # accelerate's inf, written so hjson (DeepSpeed) reads it back
    # A DeepSpeed JSON needs --hf.
    j = CORPUS / "huggingface__transformers__tests__deepspeed__ds_config_zero3.json"
    assert CliRunner().invoke(main, ["resolve", str(j)]).exit_code == 2
    r = CliRunner().invoke(main, ["resolve", str(j), "--hf", "--per-device-train-batch-size", "3", "--world-size",
                                  "4", "--hidden-size", "1024", "--max-steps", "10"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    z = out["zero_optimization"]
    assert out["train_batch_size"] == 12 and z["reduce_bucket_size"] == 1024 * 1024
    assert z["stage3_prefetch_bucket_size"] == 943718 and z["stage3_param_persistence_threshold"] == 10240


def test_auto_without_hf_keeps_deepspeed_meaning():
    """Without --hf nothing is resolved: effective_config drops "auto" in bf16 (bf16 off)."""
    ec = effective_config({"bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": 1})
    assert ec.bf16_enabled is False
    raw, _ = hf.resolve_for_estimate({"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 0},
                                      "train_micro_batch_size_per_gpu": 1}, {"bf16": True}, from_param_count(10))
    assert effective_config(raw).bf16_enabled is True


def test_resolve_output_lints_clean_round_trip(tmp_path):
    """resolve's output is a file DeepSpeed (hjson) can read back and our own lint accepts:
    accelerate's in-memory steps_per_print=inf must not become a string or an unreadable 1e999."""
    from tests.conftest import SAMPLES, run_cli

    p = run_cli(["resolve", str(SAMPLES / "hf_trainer_zero3_auto.json"), "--hf", "--per-device-train-batch-size", "4",
                 "--bf16", "--max-steps", "100", "--world-size", "8", "--model", "llama-3-8b"])
    out = tmp_path / "resolved.json"
    out.write_text(p.stdout)
    import hjson
    assert hjson.loads(p.stdout)["steps_per_print"] == (1 << 63) - 1
    q = run_cli(["lint", str(out), "--world-size", "8", "--format", "json"])
    assert q.returncode == 0, q.stdout


@pytest.mark.parametrize("warmup,written", [(0, "auto"), (5, "auto"), (0.1, "auto"), (0, 0), (0, 1)])
def test_warmup_fill_equals_transformers(warmup, written):
    """warmup_num_steps as transformers 5.24.0 fills it: max(1, get_warmup_steps(n)) for "auto"
    (so a Trainer run with no warmup gets 1, which DeepSpeed accepts), a mismatch for a written 0."""
    pytest.importorskip("transformers")
    raw = {"train_micro_batch_size_per_gpu": "auto", "scheduler": {"type": "WarmupDecayLR", "params": {
        "total_num_steps": "auto", "warmup_num_steps": written, "warmup_max_lr": "auto"}}}
    want, want_mismatch = _tf_fill(raw, warmup_steps=warmup)
    got, findings = hf.trainer_fill(raw, hf.TrainerArgs.from_mapping(dict(ARGS, warmup_steps=warmup)), hidden_size=HIDDEN)
    assert got == want
    assert [f.message.split(": the HF Trainer raises")[0] for f in findings if f.code == "H001"] == want_mismatch


def test_max_steps_minus_one_is_epoch_based_never_written():
    """--max-steps -1 is TrainingArguments' default: "train for num_train_epochs". transformers'
    Trainer.set_initial_training_values (trainer.py: epoch_based = max_steps < 0) then derives
    num_training_steps from the dataloader's length, which the advisor does not know: the
    scheduler's "auto" total_num_steps stays unresolved (H003), never -1."""
    transformers = pytest.importorskip("transformers")
    from transformers import Trainer, TrainingArguments

    def steps(n_batches: int) -> int:  # the Trainer's own arithmetic, on a stub Trainer and dataloader
        args = TrainingArguments(output_dir="/tmp/unused", max_steps=-1, num_train_epochs=3,
                                 gradient_accumulation_steps=2, report_to=[])
        stub = types.SimpleNamespace(get_total_train_batch_size=lambda a: 8, get_sp_size=lambda: 1,
                                     num_examples=lambda dl: n_batches * 8)
        return Trainer.set_initial_training_values(stub, args, [0] * n_batches)[-1]

    assert (steps(100), steps(10)) == (150, 15)  # ceil(3 x ceil(L / 2)): the data decides, -1 is no count
    raw = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
           "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto", "warmup_num_steps": "auto"}}}
    got, findings = hf.trainer_fill(raw, hf.TrainerArgs.from_mapping({"max_steps": -1}))
    assert got["scheduler"]["params"]["total_num_steps"] == "auto"
    assert [f for f in findings if f.code == "H003" and "scheduler" in f.pointer]
    # a positive max_steps is the count transformers fills (trainer_config_finalize fill_match)
    got, _ = hf.trainer_fill(raw, hf.TrainerArgs.from_mapping({"max_steps": 300}))
    assert got["scheduler"]["params"]["total_num_steps"] == 300


def test_max_steps_zero_is_a_count_of_zero_in_lint_and_resolve_alike(tmp_path):
    """--max-steps 0 is not epoch-based: transformers' Trainer.set_initial_training_values
    (trainer.py: epoch_based = max_steps < 0) keeps 0 for a sized dataset and hands
    deepspeed_init(num_training_steps=0), and raises without a length. The scheduler's "auto"
    total_num_steps is then 0 (warmup_num_steps max(1, ceil(0 x ratio)) = 1, trainer_config_finalize).
    `lint --hf` dropped a given 0 (0 == False in the CLI's "not given" filter) and said nothing,
    while `resolve` said H003; both now fill 0 and report the same findings."""
    pytest.importorskip("transformers")
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "unused"), max_steps=0, num_train_epochs=3, report_to=[])
    stub = types.SimpleNamespace(get_total_train_batch_size=lambda a: 8, get_sp_size=lambda: 1,
                                 num_examples=lambda dl: len(dl) * 8)
    assert Trainer.set_initial_training_values(stub, args, [0] * 100)[-1] == 0
    with pytest.raises(ValueError, match="max_steps must be set to a positive value"):
        Trainer.set_initial_training_values(stub, args, iter([0]))
    want, _ = _tf_fill({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto",
                                                                             "warmup_num_steps": "auto"}}},
                       max_steps=0, warmup_steps=0.1)
    assert want["scheduler"]["params"] == {"total_num_steps": 0, "warmup_num_steps": 1}
    cfg = tmp_path / "s.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
                               "scheduler": {"type": "WarmupDecayLR", "params": {
                                   "total_num_steps": "auto", "warmup_num_steps": "auto"}}}))
    from tests.conftest import run_cli
    p = run_cli(["resolve", str(cfg), "--hf", "--max-steps", "0", "--warmup-steps", "0.1"])
    assert json.loads(p.stdout)["scheduler"]["params"] == want["scheduler"]["params"], p.stdout
    said = sorted(ln for ln in p.stderr.splitlines() if re.match(r"^\S+: (error|warning|info) ", ln))
    q = run_cli(["lint", str(cfg), "--hf", "--max-steps", "0", "--warmup-steps", "0.1", "--format", "json"])
    linted = sorted(f["code"] for f in json.loads(q.stdout)["files"][0]["findings"])
    assert [ln.split()[2] for ln in said] == linted and "H003" not in linted, (said, linted)


def test_string_stage_3_skips_the_save_gather_in_accelerate_as_h008_says():
    """"stage": "3": DeepSpeed's config coerces it to ZeRO-3 (DeepSpeedZeroConfig.stage), but
    accelerate's own Accelerator.get_state_dict compares the stage as written (== 3), so it never
    gathers the 16-bit weights and returns the module's state_dict (empty ZeRO-3 partitions),
    even with stage3_gather_16bit_weights_on_model_save true. Run here on stand-ins for the engine:
    with 3 it gathers, with "3" it does not. H008 (lint --hf) says so for the string; for 3 with
    the gather on it says nothing."""
    pytest.importorskip("accelerate")
    pytest.importorskip("deepspeed")
    from accelerate import Accelerator
    from accelerate.utils import DistributedType
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    assert int(DeepSpeedZeroConfig(stage="3").stage) == 3

    class Engine:  # the DeepSpeedEngine methods get_state_dict calls
        def zero_gather_16bit_weights_on_model_save(self):
            return True

        def _zero3_consolidated_16bit_state_dict(self):
            return {"gathered": True}

        def state_dict(self):
            return {}

    def saved(stage):
        acc = types.SimpleNamespace(distributed_type=DistributedType.DEEPSPEED,
                                    deepspeed_config={"zero_optimization": {"stage": stage}},
                                    unwrap_model=lambda m: m)
        return Accelerator.get_state_dict(acc, Engine())

    assert saved(3) == {"gathered": True} and saved("3") == {}
    from advisor.config.loading import parse_text
    from advisor.views.lint import lint_config

    def h008(stage):
        raw = {"train_micro_batch_size_per_gpu": "auto",
               "zero_optimization": {"stage": stage, "stage3_gather_16bit_weights_on_model_save": True}}
        return [f for f in lint_config(parse_text(json.dumps(raw), "ds.json"), hf=True, select={"H008"})]

    (f,) = h008("3")
    assert "gather" in f.message and "empty" in f.message and f.pointer == "/zero_optimization/stage"
    assert h008(3) == []


def test_trainer_clamps_an_auto_warmup_of_zero_to_one_so_it_is_not_flagged():
    """transformers 5.24 fills "auto" warmup_num_steps with max(1, get_warmup_steps(n))
    (integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_finalize), so a Trainer run
    with no warmup does not hit DeepSpeed's 'warmup_num_steps must be a positive integer': the
    replay fills 1 as transformers does, and lint --hf reports nothing about it (L001)."""
    pytest.importorskip("transformers")
    from advisor.config.loading import parse_text
    from advisor.views.lint import lint_config

    raw = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto", "warmup_max_lr": "auto",
                                                        "warmup_min_lr": "auto"}}}
    want, _ = _tf_fill(raw, warmup_steps=0, max_steps=100)
    assert want["scheduler"]["params"]["warmup_num_steps"] == 1
    got, _ = hf.trainer_fill(raw, hf.TrainerArgs.from_mapping(dict(ARGS, warmup_steps=0, max_steps=100)),
                             hidden_size=HIDDEN)
    assert got["scheduler"] == want["scheduler"]
    found = lint_config(parse_text(json.dumps(raw), "ds.json"), hf=True, select={"L001", "L002"},
                        trainer_args=dict(ARGS, warmup_steps=0, max_steps=100))
    assert not [f for f in found if "warmup_num_steps" in f.pointer], found


def test_h001_batch_fix_keeps_the_global_batch_or_says_how_it_changes():
    """A written gradient_accumulation_steps 4 under a Trainer run with 8: following the Trainer
    ("auto") changes the global batch; passing the config's value to the Trainer keeps it. Both
    numbers are transformers' own train_batch_size (trainer_config_process: world x per-device x
    accumulation), computed by its HfTrainerDeepSpeedConfig with each accumulation."""
    pytest.importorskip("transformers")
    raw = {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_accumulation_steps": 4,
           "zero_optimization": {"stage": 2}}
    _, mismatch = _tf_fill(raw)
    assert mismatch == ["ds gradient_accumulation_steps=4 vs hf gradient_accumulation_steps=8"]
    kept, none = _tf_fill(raw, gradient_accumulation_steps=4)
    auto, _ = _tf_fill(dict(raw, gradient_accumulation_steps="auto"))
    assert none == []
    _, findings = hf.trainer_fill(raw, hf.TrainerArgs.from_mapping(ARGS), hidden_size=HIDDEN)
    (f,) = [f for f in findings if f.code == "H001"]
    assert f.fix.startswith("pass --gradient-accumulation-steps 4 to the Trainer")
    assert f"global batch of {kept['train_batch_size']} sequences" in f.fix
    assert f"for the Trainer's {auto['train_batch_size']} " in f.fix


def test_resolve_findings_are_located_as_lint_locates_them():
    """resolve prints each finding in lint's form, ``file:line:col: severity CODE /pointer: message``
    (it gave ``file:line`` and no pointer): H003 on the scheduler's "auto" step count sits on the
    file's line 14 (counted here from the text), at the column lint reports for the same key."""
    from tests.conftest import SAMPLES, run_cli

    cfg = SAMPLES / "hf_trainer_zero3_auto.json"
    line = next(i for i, x in enumerate(cfg.read_text().splitlines(), 1) if '"total_num_steps"' in x)
    lint = json.loads(run_cli(["lint", str(cfg), "--format", "json"]).stdout)["files"][0]["findings"]
    col = next(f["column"] for f in lint if f["pointer"] == "/scheduler/params/total_num_steps")
    p = run_cli(["resolve", str(cfg), "--hf"], env={"COLUMNS": "400"})
    assert line == 14 and p.returncode == 0, p.stderr
    want = f"{cfg}:{line}:{col}: info H003 /scheduler/params/total_num_steps: the scheduler's step counts"
    assert any(x.startswith(want) for x in p.stderr.splitlines()), p.stderr
    assert "    fix: pass --max-steps N" in p.stderr.splitlines()


def test_h001_batch_fix_keeps_one_side_global_batch_and_applied_clears_it(tmp_path):
    """Config micro-batch 4 x accumulation 2 on 2 ranks = 16 sequences (DeepSpeed _batch_assertion);
    the Trainer's defaults 8 x 1 x 2 = 16. transformers' own HfTrainerDeepSpeedConfig reports both
    keys. Each H001 fix gives the config's global batch from the config's numbers alone (the old
    text multiplied the config's accumulation by the Trainer's micro-batch: 2 x 8 x 2 = 32) and
    names the Trainer arguments that keep it; passed to lint, they clear every H001."""
    from tests.conftest import run_json

    raw = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2}}
    _, mism = _tf_fill(raw, world_size=2, per_device_train_batch_size=8, gradient_accumulation_steps=1)
    assert sorted(m.split("=")[0] for m in mism) == ["ds gradient_accumulation_steps",
                                                     "ds train_micro_batch_size_per_gpu"]
    cfg = tmp_path / "b.json"
    cfg.write_text(json.dumps(raw))
    rc, out = run_json(["lint", str(cfg), "--hf", "--world-size", "2", "--format", "json"])
    h1 = [f for f in out["files"][0]["findings"] if f["code"] == "H001"]
    assert len(h1) == 2 and rc == 1, out
    for f in h1:
        assert "global batch of 16 sequences (micro-batch 4 x accumulation 2 x 2 ranks)" in f["fix"], f["fix"]
        assert "Trainer's 16 (8 x 1 x 2)" in f["fix"], f["fix"]
    flags = re.search(r"pass (.*?) to the Trainer", h1[0]["fix"]).group(1).split()
    rc, out = run_json(["lint", str(cfg), "--hf", "--world-size", "2", *flags, "--format", "json"])
    assert rc == 0 and not [f for f in out["files"][0]["findings"] if f["code"] == "H001"], out


_PREPARE_DEEPSPEED = r'''
import copy, json, os, socket, sys, types
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
os.environ.update(DS_ACCELERATOR="cpu", ACCELERATE_USE_DEEPSPEED="true", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                  MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
import torch, deepspeed
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig
raw, hidden = json.loads(sys.argv[1]), int(sys.argv[2])
m = torch.nn.Linear(4, 4)
m.config = types.SimpleNamespace(hidden_size=hidden)
c = HfTrainerDeepSpeedConfig(copy.deepcopy(raw))
c.trainer_config_finalize(types.SimpleNamespace(get_warmup_steps=lambda n: 0), m, 10)
after_trainer = copy.deepcopy(c.config["zero_optimization"])
acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=c.config))
def initialize(**kw):  # what _prepare_deepspeed hands DeepSpeed; stop there
    print(json.dumps({"is_zero3": c.is_zero3(), "after_trainer": after_trainer,
                      "to_deepspeed": kw["config_params"]["zero_optimization"]}))
    raise SystemExit(0)
deepspeed.initialize = initialize
acc.prepare(m, torch.optim.AdamW(m.parameters()))
'''


def test_string_stage_3_auto_sizes_are_filled_by_accelerate_as_resolve_fills_them(tmp_path):
    """Issue #19 (newcomer 1) said resolve should leave stage3_prefetch_bucket_size and
    stage3_param_persistence_threshold "auto" for "stage": "3" (HfDeepSpeedConfig.is_zero3 is
    False for the string). transformers' trainer_config_finalize does leave them, but accelerate's
    own Accelerator._prepare_deepspeed then fills both from hidden_size whatever the stage. The
    expected values are what the real Trainer step and the real _prepare_deepspeed hand
    deepspeed.initialize (a subprocess: Accelerator sets process-wide state)."""
    pytest.importorskip("accelerate")
    pytest.importorskip("transformers")
    pytest.importorskip("deepspeed")
    import os
    import subprocess
    import sys

    h = 4096  # llama-3-8b
    raw = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": "3", "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                                 "stage3_param_persistence_threshold": "auto"}}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "RANK", "WORLD_SIZE", "LOCAL_"))}
    p = subprocess.run([sys.executable, "-c", _PREPARE_DEEPSPEED, json.dumps(raw), str(h)], env=env,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    real = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else None
    assert real is not None, p.stderr[-3000:]
    assert real["is_zero3"] is False
    assert real["after_trainer"]["stage3_prefetch_bucket_size"] == "auto"  # the Trainer leaves them
    res = hf.resolve_trainer(raw, hf.TrainerArgs(), hidden_size=h)
    z = res.config["zero_optimization"]
    keys = ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold")
    assert {k: z[k] for k in keys} == {k: real["to_deepspeed"][k] for k in keys}
    assert res.filled["zero_optimization.stage3_prefetch_bucket_size"][2].startswith("accelerate")


def test_bf16_with_fp16_is_the_usage_error_transformers_raises(tmp_path):
    """Issue #19 (newcomer 8): --bf16 --fp16 gave H004 'the config enables bf16' on a config whose
    bf16 is "auto". transformers' own TrainingArguments refuses the pair before any DeepSpeed
    config is read; lint, resolve and estimate now say that, as one usage line (exit 2)."""
    pytest.importorskip("transformers")
    import subprocess
    import sys

    from transformers import TrainingArguments

    with pytest.raises(ValueError) as e:
        TrainingArguments(output_dir=str(tmp_path / "out"), bf16=True, fp16=True, use_cpu=True)  # CPU: past the GPU check
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
                               "zero_optimization": {"stage": 2}}))
    for cmd in (["lint"], ["resolve"], ["estimate", "--model", "gpt2"]):
        p = subprocess.run([sys.executable, "-m", "advisor", cmd[0], str(cfg), *cmd[1:], "--hf", "--bf16", "--fp16"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert str(e.value) in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_l002_checks_the_scheduler_steps_the_trainer_fills(tmp_path):
    """Issue #19 (newcomer 7): L002's total-below-warmup check skipped "auto" values, so under
    --hf --warmup-steps 200 --max-steps 95 it never saw what DeepSpeed receives. The filled values
    are transformers' own (HfTrainerDeepSpeedConfig); DeepSpeed 0.19.8's WarmupDecayLR warns when
    total_num_steps < warmup_num_steps (runtime/lr_schedules.py, WarmupDecayLR.__init__)."""
    pytest.importorskip("transformers")
    import subprocess
    import sys

    raw = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
           "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto", "total_num_steps": "auto"}}}
    got, errs = _tf_fill(raw, warmup_steps=200, max_steps=95)
    assert not errs
    total, warmup = got["scheduler"]["params"]["total_num_steps"], got["scheduler"]["params"]["warmup_num_steps"]
    assert total < warmup  # DeepSpeed's own condition for its warning
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(raw))
    p = subprocess.run([sys.executable, "-m", "advisor", "lint", str(cfg), "--hf", "--warmup-steps", "200",
                        "--max-steps", "95", "--format", "json"], capture_output=True, text=True, timeout=120)
    found = [f for file in json.loads(p.stdout)["files"] for f in file["findings"] if f["code"] == "L002"
             and f["pointer"] == "/scheduler/params/total_num_steps"]
    assert len(found) == 1, p.stdout
    assert f"total_num_steps {total} is less than warmup_num_steps {warmup}" in found[0]["message"]


def test_h001_train_batch_size_fix_names_the_arguments_it_is_computed_from():
    """Issue #19 (cosmetic): the fix said 'change the Trainer argument train_batch_size', which is
    not a TrainingArguments field: transformers' trainer_config_process computes it as world_size x
    per_device_train_batch_size x gradient_accumulation_steps. The mismatch and its value are
    transformers' own (HfTrainerDeepSpeedConfig's error text)."""
    pytest.importorskip("transformers")
    from transformers import TrainingArguments

    assert "train_batch_size" not in {f.name for f in __import__("dataclasses").fields(TrainingArguments)}
    raw = {"train_batch_size": 96, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "zero_optimization": {"stage": 2}}
    _, lines = _tf_fill(raw, world_size=1, per_device_train_batch_size=4, gradient_accumulation_steps=1)
    (want,) = [ln for ln in lines if ln.startswith("ds train_batch_size=")]
    res = hf.resolve_trainer(raw, hf.TrainerArgs(per_device_train_batch_size=4))
    (f,) = [f for f in res.findings if f.code == "H001" and f.data["key"] == "train_batch_size"]
    assert f"ds train_batch_size={f.data['config']} vs hf {f.data['trainer_arg']}={f.data['trainer']}" == want
    assert "--per-device-train-batch-size" in f.fix and "--gradient-accumulation-steps" in f.fix
    assert "Trainer argument train_batch_size" not in f.fix


def test_accelerate_json_is_read_with_json_load_not_yaml(tmp_path):
    # newcomer D6: accelerate reads a config named *.json with json.load (accelerate/commands/config/
    # config_args.py load_config_from_file); a "\ud800" escape is valid JSON (json.loads reads it) but
    # not valid YAML, so the file must not be refused as "not valid YAML". As .yaml, YAML refuses it.
    from tests.conftest import run_cli

    text = ('{"distributed_type":"DEEPSPEED","num_processes":8,"num_machines":1,"mixed_precision":"bf16",'
            '"deepspeed_config":{"zero_stage":3,"zero3_save_16bit_model":true},"machine_rank":0,"\\ud800k":1}')
    assert "\ud800k" in json.loads(text)
    (tmp_path / "acc.json").write_text(text)
    p = run_cli(["lint", str(tmp_path / "acc.json")])
    assert "not valid YAML" not in p.stderr, p.stderr
    # read as JSON; its one finding is the key "\ud800k" itself, which accelerate's from_json_file then
    # refuses as an unknown key (H010), as it would any key that is not a ClusterConfig field
    assert p.returncode == 1 and "accelerate config" in p.stdout + p.stderr, p.stdout + p.stderr
    assert "error H010" in p.stdout and p.stdout.count("error ") == 1, p.stdout
    launch = hf.read_accelerate_config(str(tmp_path / "acc.json"), text)
    assert [f.code for f in launch.findings] == ["H010"]
    assert launch.num_processes == 8 and launch.mixed_precision == "bf16"
    (tmp_path / "acc.yaml").write_text(text)
    y = run_cli(["lint", str(tmp_path / "acc.yaml")])
    assert y.returncode == 2 and "not valid YAML" in y.stderr
