"""A newcomer's report from a clean clone (third session): configs DeepSpeed refuses got an
estimate, --set values skipped the file's validation, --checkpointing K was clamped, the
--fragmentation surface was uneven, advisor.preflight had no signature, generate's counts did
not add up.

Expected values come from DeepSpeed's own code (DeepSpeedZeroConfig refuses stage 7;
DeepSpeedConfig._batch_assertion refuses a micro-batch of 0), from the model's published config
(Llama-2-7b: num_hidden_layers 32), from JSON's grammar (RFC 8259 has no NaN or Infinity), or by
counting the fits generate really runs.
"""

from __future__ import annotations

import inspect
import json

import pytest

from advisor.config.overrides import parse_value
from tests.conftest import run_cli, run_json

S7 = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 7}}
OK = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
#: meta-llama/Llama-2-7b-hf config.json: num_hidden_layers = 32.
LLAMA2_7B_LAYERS = 32


def _write(tmp_path, name, cfg):
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return str(p)


# --- 1. a config DeepSpeed refuses gets no estimate -------------------------------------------

def test_deepspeed_itself_refuses_stage_7():
    zc = pytest.importorskip("deepspeed.runtime.zero.config")
    with pytest.raises(Exception) as e:  # pydantic ValidationError: "Input should be 0, 1, 2, 3"
        zc.DeepSpeedZeroConfig(stage=7)
    assert "stage" in str(e.value)


def test_estimate_check_report_stop_on_a_refused_config(tmp_path):
    cfg = _write(tmp_path, "s7.json", S7)
    common = ["--model", "llama-2-7b", "--seq-len", "512", "--gpu-memory", "800GB"]
    p = run_cli(["estimate", cfg, *common])
    assert p.returncode == 1, p.stderr
    assert "S004" in p.stdout and "No estimate" in p.stdout
    assert "Per-rank training state" not in p.stdout and "fits" not in p.stdout.lower().replace("fix", "")
    rc, d = run_json(["estimate", cfg, *common, "--format", "json"])
    assert rc == 1 and d["ranks"] == [] and not d.get("fit") and "S004" in d["unsupported"]

    p = run_cli(["check", cfg, *common, "--host-memory", "1TB"])
    assert p.returncode == 1 and "S004" in p.stdout and "FITS" not in p.stdout
    assert p.stdout.strip().splitlines()[-1] == "NO-GO (exit 1)"
    assert "none: DeepSpeed would refuse this config" in p.stdout

    pytest.importorskip("matplotlib")  # report: the page says why (no estimate), as for M090 configs
    out = tmp_path / "r.html"
    p = run_cli(["report", cfg, "--model", "llama-2-7b", "--seq-len", "512", "-o", str(out)])
    page = out.read_text()
    assert p.returncode == 0 and "id=unsupported" in page and "S004" in page


def test_a_refused_config_at_the_batch_assertion_gets_no_estimate(tmp_path):
    # DeepSpeedConfig._batch_assertion: "Train batch size: 0 has to be greater than 0"
    rc_mod = pytest.importorskip("deepspeed.runtime.config")
    with pytest.raises(AssertionError):
        rc_mod.DeepSpeedConfig({"train_micro_batch_size_per_gpu": 0, "gradient_accumulation_steps": 1})
    cfg = _write(tmp_path, "mb0.json", {"train_micro_batch_size_per_gpu": 0})
    rc, d = run_json(["estimate", cfg, "--params", "1000000", "--gpu-memory", "80GB", "--format", "json"])
    assert rc == 1 and d["ranks"] == []
    # one fault, one finding (issue #19): the schema's S004 (minimum 1), not B001 as well
    at = [f["code"] for f in d["findings"] if f["pointer"] == "/train_micro_batch_size_per_gpu"]
    assert at == ["S004"], d["findings"]


# --- 2 and 7. --set: one parsing rule, the file's validation ------------------------------------

@pytest.mark.parametrize("raw, value", [
    ("3", 3), ("-2", -2), ("+2", 2), ("5e8", 5e8), ("0.5", 0.5), (".5", 0.5),
    ("true", True), ("false", False), ("null", None), ('"auto"', "auto"), ('"3"', "3"),
    ('{"device": "cpu"}', {"device": "cpu"}), ("[1, 2]", [1, 2]),
    ("AdamW", "AdamW"), ("cpu", "cpu"), ("True", "True"),  # not JSON's literals: the string itself
])
def test_set_values_read_json_like(raw, value):
    got = parse_value(raw)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("raw", ["nan", "NaN", "NAN", "inf", "-inf", "Infinity", "-Infinity", "1e999",
                                 '{"x": NaN}', "[1e999]"])
def test_set_non_finite_is_refused_everywhere(raw):
    with pytest.raises(ValueError) as e:
        parse_value(raw)
    assert "finite" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("setting, says", [
    ("a.b=nan", "not a finite number"),
    ("zero_optimization.stage=NaN", "not a finite number"),
    ("train_micro_batch_size_per_gpu=1e30", "over the limit"),
    ("train_micro_batch_size_per_gpu=0", ">= 1"),
    ("train_micro_batch_size_per_gpu=2.5", "expected an integer"),
    ("zero_optimization.stage=7", "expected one of 0, 1, 2, 3"),
    ("zero_optimization.stag=3", "did you mean 'stage'"),
])
def test_bad_set_value_is_one_line_naming_the_argument(tmp_path, setting, says):
    cfg = _write(tmp_path, "ok.json", OK)
    p = run_cli(["estimate", cfg, "--params", "1000000", "--gpu-memory", "80GB", "--set", setting])
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert f"--set {setting!r}" in lines[0] and says in lines[0] and "Traceback" not in p.stderr


def test_file_and_set_share_the_batch_limit(tmp_path):
    # DeepSpeed 0.19.8 itself keeps 1e30 at config time (it fails later, in the data loader): in a
    # file it is error B002 and no estimate; through --set it is exit 2 (the test above)
    cfg = _write(tmp_path, "big.json", {"train_micro_batch_size_per_gpu": 1e30})
    rc, d = run_json(["estimate", cfg, "--params", "1000000", "--gpu-memory", "80GB", "--format", "json"])
    assert rc == 1 and d["ranks"] == [] and "B002" in {f["code"] for f in d["findings"]}
    good = _write(tmp_path, "good.json", OK)
    assert run_cli(["estimate", good, "--params", "1000000", "--set", "train_micro_batch_size_per_gpu=4"]).returncode == 0


def test_set_help_documents_the_rule():
    p = run_cli(["estimate", "--help"])
    assert "JSON-like" in p.stdout and "nan/inf" in p.stdout


# --- 3. --checkpointing K beyond the layers --------------------------------------------------

def test_checkpointing_more_layers_than_the_model_is_refused(tmp_path):
    cfg = _write(tmp_path, "ok.json", OK)
    base = ["--model", "llama-2-7b", "--seq-len", "512"]
    for cmd in ("estimate", "check"):
        p = run_cli([cmd, cfg, *base, "--checkpointing", str(LLAMA2_7B_LAYERS + 1)])
        line = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(line) == 1, p.stderr
        assert "--checkpointing 33" in line[0] and f"{LLAMA2_7B_LAYERS} layers" in line[0]
    assert run_cli(["estimate", cfg, *base, "--checkpointing", str(LLAMA2_7B_LAYERS)]).returncode == 0
    # per pipeline stage: 32 layers over 2 stages = 16 each
    p = run_cli(["estimate", cfg, *base, "--checkpointing", "17", "--pipeline-parallel", "2", "--world-size", "2"])
    assert p.returncode == 2 and "16 per pipeline stage" in p.stderr


# --- 4. --fragmentation wherever estimate takes it ---------------------------------------------

def test_fragmentation_is_accepted_with_the_warning_on_check_and_generate(tmp_path):
    cfg = _write(tmp_path, "ok.json", OK)
    p = run_cli(["check", cfg, "--model", "llama-2-7b", "--seq-len", "512", "--gpu-memory", "80GB",
                 "--fragmentation", "0.2"])
    assert p.returncode in (0, 1, 4) and "--fragmentation is deprecated" in p.stderr
    assert "20% of the tracked peak" in p.stdout
    p = run_cli(["generate", "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--nodes", "1",
                 "--gpus-per-node", "8", "--global-batch", "64", "--seq-len", "1024", "--fragmentation", "0.2"])
    assert p.returncode == 0 and "--fragmentation is deprecated" in p.stderr


# --- 5. advisor.preflight's signature and its Python-side errors -------------------------------

def test_preflight_has_a_signature_and_a_docstring():
    import advisor
    params = inspect.signature(advisor.preflight).parameters
    assert {"model", "ds_config", "free_accelerator_bytes", "free_host_bytes", "seq_len", "raise_on"} <= set(params)
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values())
    doc = inspect.getdoc(advisor.preflight)
    assert "bytes" in doc and "PreflightError" in doc


def test_preflight_refuses_bad_free_memory_and_refused_configs_by_parameter_name():
    torch = pytest.importorskip("torch")
    import advisor
    from advisor.errors import PreflightError
    m = torch.nn.Sequential(torch.nn.Linear(64, 64))
    ok = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    for kw in ({"free_accelerator_bytes": -1}, {"free_host_bytes": float("nan")},
               {"free_accelerator_bytes": float("inf")}):
        with pytest.raises(PreflightError) as e:
            advisor.preflight(m, ok, world_size=1, **kw)
        assert next(iter(kw)) in str(e.value) and "--" not in str(e.value)
    with pytest.raises(PreflightError) as e:
        advisor.preflight(m, ok, world_size=1, runtime_overhead="nccl=80")
    assert "runtime_overhead=" in str(e.value) and "--" not in str(e.value)
    with pytest.raises(PreflightError) as e:  # stage 7 is no "fits", even with room to spare
        advisor.preflight(m, {**ok, "zero_optimization": {"stage": 7}}, world_size=1,
                          free_accelerator_bytes=10**12, free_host_bytes=10**12, raise_on=None)
    assert "S004" in str(e.value) and e.value.result.verdict == "refused" and e.value.result.rows == []


# --- 6. generate's counts partition the candidates ---------------------------------------------

def test_generate_counts_partition_the_fits_it_runs(monkeypatch):
    from advisor.cluster.hardware import resolve_hardware
    from advisor.model.specs import resolve_model
    from advisor.views import estimate as est
    from advisor.views import generate as gen

    calls = []
    real = est.plan_fit

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(est, "plan_fit", counting)  # search imports it from the module at call time
    from dataclasses import replace
    hw = replace(resolve_hardware("dgx-h100"), nodes=1, accelerators_per_node=8)
    req = gen.Request(global_batch=64, seq_len=4096, nodes=1, gpus_per_node=8, optimizer="adamw",
                      precision="bf16", hf=False)
    res = gen.search(resolve_model("llama-2-7b"), hw, req)
    assert res.evaluated == len(calls) > 0
    assert res.rejected and res.superseded and res.ranked  # this search has all three kinds
    assert res.evaluated == len(res.ranked) + res.superseded + len(res.rejected)
    assert all(c.rejection is not None for c in res.rejected) and all(c.rejection is None for c in res.ranked)
    text = " ".join(gen.table_text(res).split())
    assert f"{res.evaluated} plans evaluated = {len(res.ranked)} ranked + {res.superseded} superseded" in text
    assert f"+ {len(res.rejected)} rejected" in text and f"rejected: {len(res.rejected)} (" in text


def test_preflight_texts_name_parameters_not_flags():
    # tests/test_preflight.py's by-hand case: 4 x 1024^2 parameters at ZeRO-0 bf16 need 28.4 B x N (24 B
    # tracked + 10% + the 2 B bucket) with a 3.6 B x N band; 29 B x N free is tight, so M102 (whose CLI
    # fix names --runtime-overhead) fires; a plain nn.Sequential has no architecture, so M104 (whose CLI
    # text names --model and --params) fires too.
    torch = pytest.importorskip("torch")
    import advisor
    n = 4 * 1024 * 1024
    m = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False) for _ in range(4)])
    z0 = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 0},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    r = advisor.preflight(m, z0, world_size=1, free_accelerator_bytes=29 * n, free_host_bytes=10**12,
                          runtime_overhead={"nccl": 0}, raise_on=None)
    assert r.verdict == "tight" and {"M102", "M104"} <= {f.code for f in r.findings}
    texts = [f.message + " " + f.fix for f in r.findings] + r.notes + [
        str(o.get("source", "")) + " " + str(o.get("formula", "")) for row in r.rows for o in row.overhead]
    assert not [t for t in texts if "--" in t], texts
    assert any("runtime_overhead" in t for t in texts) and any("model.config" in t for t in texts)


def test_no_estimate_names_who_refuses(tmp_path):
    """'No estimate' names the refuser: an H001 mismatch is the HF Trainer's refusal
    (trainer_config_finalize raises; test_hf runs it), not DeepSpeed's; stage 7 is DeepSpeed's
    (DeepSpeedZeroConfig rejects it)."""
    hf = tmp_path / "hf.json"
    hf.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 4,
                              "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}))
    r = run_cli(["estimate", str(hf), "--model", "gpt2", "--world-size", "1", "--seq-len", "128", "--hf"])
    assert r.returncode == 1 and "H001" in r.stdout
    assert "No estimate: the HF Trainer or accelerate would refuse" in " ".join(r.stdout.split())
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 7}}))
    r = run_cli(["estimate", str(ds), "--model", "gpt2", "--world-size", "1", "--seq-len", "128"])
    assert r.returncode == 1 and "No estimate: DeepSpeed would refuse" in " ".join(r.stdout.split())
