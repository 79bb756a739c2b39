"""advisor.preflight on CPU with small torch models and the free memory faked through its
parameters (advisor/engine/preflight.py). Expected bytes are computed here by hand:

ZeRO-0, bf16, one rank: the tracked peak is 24 B per parameter (16-bit parameters 2 + gradients 2
+ fp32 master weights 4 + Adam moments 8 + fp32 gradients in the step 4, reference section 9, + the
per-parameter fp32 copies FP16_Optimizer.step flattens into them 4, fp16/fused_optimizer.py l.287,
measured by tests/engine/test_peak_parity.py z0_bf16_w2), and the runtime overhead adds the
allocator's 10% of that (2.4 B per parameter, rounded up), the ZeRO-0 all-reduce bucket
min(N, 5e8) x 2 B (deepspeed/runtime/engine.py buffered_allreduce_fallback), no NCCL buffers (one
rank) and no CUDA context (the free memory is read after it exists): need = 28.4 B x N; the band
above the defaults is the allocator's 25% - 10% = 3.6 B x N.

A plain ``nn.Sequential`` has no architecture (no Hugging Face ``model.config``), so its activations are not
estimated and that need is a floor (rule M104, as estimate's and check's with ``--params``): its verdict is at
best "tight". A "fits" needs a module whose activations are estimated: :func:`_llama` (a transformers Llama
built from its config) with ``seq_len`` given, its need bounded by hand in
:func:`test_a_module_with_an_architecture_fits_by_hand`.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="advisor.preflight inspects a torch nn.Module: needs torch")

import advisor  # noqa: E402
from advisor.errors import PreflightError  # noqa: E402

Z0 = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 0},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}


def _mlp():
    return torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False) for _ in range(4)])


N = 4 * 1024 * 1024
ALLOC = -(-24 * N // 10)          # the allocator's 10% of the tracked 24 B x N, rounded up
NEED = 24 * N + ALLOC + 2 * N     # tracked + allocator + the all-reduce bucket (module docstring)
BAND = 6 * N - ALLOC              # the allocator's 25% of 24 B x N less its 10%


def _m104(r):
    return next((f for f in r.findings if f.code == "M104"), None)


def test_tight_and_does_not_fit_by_hand():
    m = _mlp()
    assert sum(p.numel() for p in m.parameters()) == N
    r = advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=33 * N, free_host_bytes=10**12)
    acc = r.rows[0]
    # 33 B x N leaves 4.6 B x N, more than the 3.6 B x N band: "fits" were the activations counted; a module
    # without an architecture has a floor for a need (M104), so "tight", and raise_on="tight" raises on it
    assert (acc.tier, acc.need, acc.capacity, acc.verdict) == ("accelerator", NEED, 33 * N, "tight")
    assert acc.uncertainty == BAND and acc.headroom > acc.uncertainty and acc.lower_bound
    by_key = {o["key"]: o["bytes"] for o in acc.overhead}
    assert by_key == {"cuda_context": 0, "nccl": 0, "allocator": ALLOC, "deepspeed": 2 * N}
    assert r.verdict == "tight" and r.fits and "the peak is a lower bound: M104" in acc.line()
    f = _m104(r)
    assert f is not None and f.data["activations_missing"] and not f.data["transients_unmodeled"]
    assert "model.config" in f.message and "model.config" in f.fix and "--" not in f.message + f.fix
    with pytest.raises(PreflightError, match="lower bound") as ei:
        advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=33 * N, free_host_bytes=10**12,
                          raise_on="tight")
    assert ei.value.result.verdict == "tight"

    r = advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=29 * N, free_host_bytes=10**12)
    assert r.verdict == "tight" and r.rows[0].headroom == 29 * N - NEED and "allocator" in r.rows[0].uncertain_terms[0]
    with pytest.raises(PreflightError, match="tight"):
        advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=29 * N, free_host_bytes=10**12,
                          raise_on="tight")

    with pytest.raises(PreflightError) as ei:
        advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=27 * N, free_host_bytes=10**12)
    assert "does not fit" in str(ei.value) and "accelerator" in str(ei.value)
    assert ei.value.result.verdict == "does not fit" and ei.value.result.rows[0].headroom == 27 * N - NEED
    r = advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=27 * N, raise_on=None)
    assert r.verdict == "does not fit" and not r.fits


def test_meta_device_model_gives_the_same_need():
    with torch.device("meta"):
        m = _mlp()
    assert all(p.device.type == "meta" for p in m.parameters())
    r = advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=33 * N, free_host_bytes=10**12)
    assert r.rows[0].need == NEED and r.verdict == "tight" and r.rows[0].lower_bound  # no architecture: M104


def test_eight_ranks_add_nccl_and_the_context_stays_out():
    # ZeRO-3 on 8 ranks: one data-parallel communicator, 16 channels x 2 x 4 MiB x 2 = 256 MiB
    z3 = dict(Z0, zero_optimization={"stage": 3})
    r = advisor.preflight(_mlp(), z3, world_size=8, free_accelerator_bytes=10**10, free_host_bytes=10**12)
    o = {x["key"]: x for x in r.rows[0].overhead}
    assert o["nccl"]["bytes"] == 256 << 20 and o["cuda_context"]["bytes"] == 0
    assert "already inside" in o["cuda_context"]["formula"]


def test_host_is_checked_without_the_load_phase():
    r = advisor.preflight(_mlp(), Z0, world_size=1, free_accelerator_bytes=10**10, free_host_bytes=1, raise_on=None)
    host = next(x for x in r.rows if x.tier == "host")
    assert host.capacity == 1 and "without the load phase" in host.scope
    # outside the load the host holds the checkpoint save's copy of one accelerator storage
    # (torch/serialization.py l.1290-1310): BF16_Optimizer's fp32 flat partition, at W = 1 the
    # whole group padded to A_2: N x 4 B
    assert host.need == N * 4 and host.verdict == "does not fit"


def test_architecture_from_hf_config_gives_activations():
    transformers = pytest.importorskip("transformers", reason="needs transformers for a Llama config")
    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, vocab_size=1000,
                                   max_position_embeddings=1024)
    with torch.device("meta"):
        m = transformers.LlamaForCausalLM(cfg)
    short = advisor.preflight(m, Z0, seq_len=128, world_size=1, free_accelerator_bytes=10**10, free_host_bytes=10**12)
    long = advisor.preflight(m, Z0, seq_len=1024, world_size=1, free_accelerator_bytes=10**10,
                             free_host_bytes=10**12)
    assert not any("activations: not estimated" in n for n in short.notes)
    assert long.rows[0].need > short.rows[0].need  # activations grow with the sequence


def test_bad_inputs_raise_a_named_error(tmp_path):
    with pytest.raises(PreflightError, match="absent.json"):
        advisor.preflight(_mlp(), str(tmp_path / "absent.json"), world_size=1)
    with pytest.raises(PreflightError, match="runtime_overhead="):  # the parameter, not the CLI flag
        advisor.preflight(_mlp(), Z0, world_size=1, runtime_overhead="nccl=80")
    with pytest.raises(PreflightError, match="ds_config"):
        advisor.preflight(_mlp(), 42, world_size=1)


def test_without_cuda_the_accelerator_is_unknown():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the probe would read it")
    r = advisor.preflight(_mlp(), Z0, world_size=1, free_host_bytes=10**12)
    assert r.rows[0].verdict == "unknown" and any("no CUDA" in n for n in r.notes)


def test_importing_advisor_does_not_import_torch():
    code = "import sys, advisor; advisor.PreflightError; assert 'torch' not in sys.modules, 'torch imported'"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0


def test_zero_init_partitioned_parameters_count_with_their_full_shape():
    # deepspeed.zero.Init leaves each parameter empty with its full shape in ds_shape and its
    # partition in ds_tensor (partition_parameters.py); the HF Trainer builds the model so at ZeRO-3
    m = _mlp()
    for p in m.parameters():
        p.ds_shape = p.shape
        p.ds_tensor = torch.empty(p.numel() // 8, dtype=torch.bfloat16)
        p.data = torch.empty(0)
    r = advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=33 * N, free_host_bytes=10**12)
    assert r.parameters == N and r.rows[0].need == NEED


def test_hf_auto_config_is_resolved_with_the_trainer_arguments():
    auto = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 0},
            "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}

    class Args:  # what TrainingArguments offers: to_dict()
        def to_dict(self):
            return {"per_device_train_batch_size": 2, "bf16": True, "output_dir": "out"}

    r = advisor.preflight(_mlp(), auto, hf=True, trainer_args=Args(), world_size=1, free_accelerator_bytes=33 * N,
                          free_host_bytes=10**12)
    assert r.rows[0].need == NEED and r.verdict == "tight"  # bf16 resolved: the same need (a floor) as above


@pytest.mark.parametrize("units,base", [("GiB", 2**30), ("GB", 1e9)])
def test_summary_names_every_size_in_one_unit_system(units, base):
    """need 28.4 B x N and capacity 29 B x N (module docstring), headroom 0.6 B x N, band 3.6 B x N: each printed
    as bytes / 2^30 (GiB, the default) or / 1e9 (GB), and no figure in the other system."""
    m = _mlp()
    r = advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=29 * N, free_host_bytes=10**12)
    s = r.summary(units) if units != "GiB" else r.summary()
    acc = next(x for x in s.splitlines() if "accelerator" in x)
    assert f"need >= {NEED / base:,.2f} {units} of {29 * N / base:,.2f} {units} free" in acc, acc  # a floor: M104
    assert f"headroom {(29 * N - NEED) / base:,.2f} {units}" in acc and f"within {BAND / base:,.2f} {units}" in acc, acc
    other = "GB" if units == "GiB" else "GiB"
    assert f" {other}" not in s, s
    with pytest.raises(ValueError, match="GiB or GB"):
        r.summary("MB")


def test_a_model_built_without_zero_init_is_whole_on_the_accelerator_at_initialize():
    # ZeRO-3 with both offloads on 8 ranks, at most one layer live (stage3_max_live_parameters), keeps
    # about one gathered layer (8192^2 x 2 B = 128 MiB) and buckets on the accelerator in the step, but a model built without deepspeed.zero.Init (no
    # ds_id on its parameters: engine.py is_zero_init_model) is cast to bf16 and moved whole to the
    # accelerator inside deepspeed.initialize: 8 x 8192^2 x 2 B = 1 GiB tracked, over 1 GiB free.
    # Built under zero.Init (ds_id set), the same model fits in it.
    z3 = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
          "zero_optimization": {"stage": 3, "reduce_bucket_size": 1000, "stage3_prefetch_bucket_size": 1000,
                                "stage3_max_live_parameters": 8192 * 8192,
                                # and none kept for reuse: with the default reuse distance (1e9 elements)
                                # the steady iteration keeps the layers it reuses within it gathered
                                # (partitioned_param_coordinator.py __params_to_release l.655-661), 8 x 128 MiB
                                "stage3_max_reuse_distance": 0,
                                "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}
    n = 8 * 8192 * 8192
    with torch.device("meta"):
        m = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192, bias=False) for _ in range(8)])
    with pytest.raises(PreflightError) as ei:
        advisor.preflight(m, z3, world_size=8, free_accelerator_bytes=2 ** 30, free_host_bytes=10**13)
    r = ei.value.result
    # M103 (the whole model at initialize) and M104 (no architecture: the need leaves out the activations)
    assert [f.code for f in r.findings if f.code.startswith("M10")] == ["M103", "M104"]
    assert r.rows[0].need > n * 2 > 2 ** 30 - 1
    for i, p in enumerate(m.parameters()):
        p.ds_id, p.ds_shape = i, p.shape
        p.ds_tensor = torch.empty(p.numel() // 8, dtype=torch.bfloat16, device="meta")
    r = advisor.preflight(m, z3, world_size=8, free_accelerator_bytes=2 ** 30, free_host_bytes=10**13)
    assert r.verdict == "tight" and r.rows[0].lower_bound and not any(f.code == "M103" for f in r.findings)


def test_summary_prints_the_overhead_rows_inside_the_accelerator_need():
    """README: summary() shows, per tier, the overhead rows. A meta-device model of 2^32 parameters
    (ZeRO-0, bf16, one rank; module docstring): tracked peak 24 B x 2^32 = 96 GiB, allocator 10 %
    of it = 9.60 GiB with its band 3 %..25 % = 2.88..24.00 GiB, DeepSpeed's all-reduce bucket
    min(N, 5e8) x 2 B = 1e9 B = 0.93 GiB (engine.py buffered_allreduce_fallback), NCCL and CUDA
    context 0 (one rank; the free memory is read after the context exists)."""
    with torch.device("meta"):
        m = torch.nn.Sequential(*[torch.nn.Linear(32768, 32768, bias=False) for _ in range(4)])
    r = advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=200 << 30, free_host_bytes=10**13)
    lines = r.summary().splitlines()
    i = next(k for k, x in enumerate(lines) if x.startswith("  accelerator"))
    rows = lines[i + 1:i + 5]
    assert [x.split(" [")[0] for x in rows] == [
        "    + CUDA context and loaded kernels 0.00 GiB",
        "    + NCCL communicator buffers 0.00 GiB",
        "    + allocator reserve and fragmentation 9.60 GiB (band 2.88 GiB-24.00 GiB)",
        "    + DeepSpeed extras beyond the ledger 0.93 GiB"], rows
    assert "[measured free memory]" in rows[0] and "buffered_allreduce_fallback" in rows[3], rows
    assert lines[i + 5].startswith("  host"), lines  # the host row has no overhead rows
    assert r.rows[0].need == 96 * 2**30 + -(-96 * 2**30 // 10) + 10**9  # 24 B + its 10 % per parameter, the bucket


def _llama():
    """A transformers Llama (hidden 256, MLP 512, 2 layers, 4 heads of 64, vocab 8000, untied, 1024 positions) on
    the meta device: its model.config gives the architecture, so with seq_len its activations are estimated."""
    transformers = pytest.importorskip("transformers", reason="needs transformers for a Llama config")
    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, vocab_size=8000,
                                   max_position_embeddings=1024, tie_word_embeddings=False)
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(cfg)


def test_a_module_with_an_architecture_fits_by_hand():
    """_llama at seq_len 1024, micro-batch 1, ZeRO-0 bf16, one rank, flash attention, no recompute: the need,
    bounded by hand both ways, fits 400 MB and does not fit 200 MB; no M104 (its activations are estimated).

    N = 2 x V h (embedding, lm_head) + L (4 h^2 + 3 h i + 2 h) + h = 5,408,000. Model states: 24 B x N in the step
    (module docstring), at most that anywhere; in backward at least the persistent 14 B x N (16-bit parameters 2,
    fp32 master 4, Adam moments 8). Activations, D = 2 bytes, s = 1024 tokens, from advisor/model/activations.py's
    terms (the module docstring's list, op by op from transformers' modeling_llama.py):
    - at least, at the loss's backward: the saved fp32 log-probabilities 4 sV with the fp32 gradients of the
      log-probabilities and logits 8 sV, and every linear's saved input still waiting for its layer's backward
      (torch saves a matmul's input for the weight gradient): per layer q/k/v's 2 sh, o_proj's 2 sh, gate/up's
      2 sh, down_proj's 2 si; the lm_head's 2 sh;
    - at most, everything at once: per layer two RMSNorms (4 + 2) sh + 4 s each, the linear inputs 2 sh x 3 +
      2 si, attention q, k, v, output 4 x 2 sh + the fp32 log-sum-exp 4 a s, gate/up/product/SiLU 4 x 2 si, the
      layer backward's output gradient 2 sh and two MLP gradients 2 x 2 si; outside the layers the final norm, the
      lm_head input, the 16-bit logits 2 sV, the fp32 copy 4 sV, the log-probabilities 4 sV, their gradients
      8 sV, the input ids 8 s.
    need = tracked x 1.1 (allocator) + the ZeRO-0 all-reduce bucket 2 B x N; "fits" when the headroom also
    covers the allocator's band to 25 %: capacity >= tracked x 1.25 + 2 B x N."""
    m = _llama()
    s, h, i, V, a, L = 1024, 256, 512, 8000, 4, 2
    n = 2 * V * h + L * (4 * h * h + 3 * h * i + 2 * h) + h
    low_acts = 12 * s * V + L * (6 * s * h + 2 * s * i) + 2 * s * h
    high_acts = (L * ((2 * (6 * s * h + 4 * s)) + 6 * s * h + 2 * s * i + 8 * s * h + 4 * a * s + 8 * s * i + 2 * s * h
                      + 4 * s * i) + (6 * s * h + 4 * s) + 2 * s * h + 18 * s * V + 8 * s)
    need_low = 1.1 * (14 * n + low_acts) + 2 * n              # 208.6e6
    need_high = 1.1 * (24 * n + high_acts) + 2 * n            # 349.3e6
    fits_from = 1.25 * (24 * n + high_acts) + 2 * n           # 395.5e6
    assert need_low > 28.4 * n  # the activations move it: without them the need is 28.4 B x N = 153.6e6
    fit_cap, short_cap = 400_000_000, 200_000_000
    assert fit_cap > fits_from and short_cap < need_low

    r = advisor.preflight(m, Z0, seq_len=s, world_size=1, free_accelerator_bytes=fit_cap, free_host_bytes=10**12,
                          raise_on="tight")  # a fit, so raise_on="tight" does not raise
    acc = r.rows[0]
    assert r.parameters == n and need_low <= acc.need <= need_high
    assert r.verdict == "fits" and acc.verdict == "fits" and not acc.lower_bound and ">=" not in acc.line()
    assert _m104(r) is None and not any("activations: not estimated" in x for x in r.notes)
    r = advisor.preflight(m, Z0, seq_len=s, world_size=1, free_accelerator_bytes=short_cap, free_host_bytes=10**12,
                          raise_on=None)
    assert r.verdict == "does not fit" and _m104(r) is None


def test_m104_names_what_a_preflight_caller_gives_not_flags(monkeypatch):
    """Each reason the activations are not estimated, in preflight's words (advisor/rules/M104: activations_fix,
    api_activations_note): a plain module -> a module with a Hugging Face model.config; a family without a
    formula (deepseek_v3's latent attention) -> the command line's trace, which preflight has not; no context
    length -> seq_len=. Each makes the verdict "tight" (a floor) and raise_on="tight" raise."""
    transformers = pytest.importorskip("transformers", reason="needs transformers for a DeepSeek-V3 config")
    from hf_small import SMALL
    d = {k: v for k, v in SMALL["deepseek_v3"].items() if k != "model_type"}
    with torch.device("meta"):
        dsv3 = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**d))
    from advisor.engine import preflight as pre
    arch = pre._architecture
    cases = [(_mlp(), {}, "model.config"), (dsv3, {"seq_len": 128}, "trace"),
             (_llama(), {}, "seq_len=")]
    for k, (m, kw, says) in enumerate(cases):
        if k == 2:  # an architecture that states no context length (an HF config always has one: simulated)
            monkeypatch.setattr(pre, "_architecture",
                                lambda mod: {x: v for x, v in arch(mod).items() if x != "max_seq_len"})
        r = advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=10**12, free_host_bytes=10**12, **kw)
        f = _m104(r)
        assert r.verdict == "tight" and r.rows[0].lower_bound and f is not None and f.data["activations_missing"]
        texts = [f.message, f.fix] + r.notes + list(f.template or ())
        assert says in f.fix and not [t for t in texts if "--" in t], texts
        assert "activations: not estimated" in f.message and any("activations: not estimated" in x for x in r.notes)
        with pytest.raises(PreflightError, match="M104"):
            advisor.preflight(m, Z0, world_size=1, free_accelerator_bytes=10**12, free_host_bytes=10**12,
                              raise_on="tight", **kw)


def test_a_lower_bound_peak_is_never_fits():
    """ZeRO-1, fp16, grad_accum_dtype bf16, no optimizer offload: the regime advisor/ledger/state.py
    zero12_transients_unmodeled leaves coarse (DeepSpeedZeroOptimizer's param.grad_accum copies, stage_1_and_2.py
    l.397-404, l.1237, are modelled under CPU optimizer offload, and without it only for fp32 accumulation,
    state.zero1_compact_grad_accum; engine probe 2026-12-06: forward:2 +50%), so the need is a
    floor: with 1 TB free (headroom far beyond the overhead's band) the verdict is tight, not fits, and the line and
    M104 say why (issue #15). On _llama with seq_len, so its activations are estimated and only the transients
    decide."""
    m = _llama()
    cfg = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True},
           "data_types": {"grad_accum_dtype": "bf16"}, "zero_optimization": {"stage": 1},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    kw = dict(seq_len=1024, world_size=2, free_accelerator_bytes=10**12, free_host_bytes=10**12, raise_on=None)
    r = advisor.preflight(m, cfg, **kw)
    acc = r.rows[0]
    assert acc.headroom > acc.uncertainty and acc.lower_bound and acc.verdict == "tight" == r.verdict
    assert "need >= " in acc.line() and "lower bound" in acc.line() and r.to_dict()["rows"][0]["lower_bound"] is True
    f = _m104(r)
    assert f is not None and f.data["transients_unmodeled"] and not f.data["activations_missing"]
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}  # modelled (zero12_offload_fp32_accum): a fit
    r = advisor.preflight(m, cfg, **kw)
    assert not r.rows[0].lower_bound and r.verdict == "fits" and _m104(r) is None
