"""ZeRO-2 with ``data_types.grad_accum_dtype`` fp32 (newcomer D2): the estimate never prints a silently lower
number than bf16 accumulation.

DeepSpeed 0.19.8 ``runtime/zero/stage_1_and_2.py``: with bf16 accumulation each rank keeps grads_in_partition,
P x 2 bytes (copy_grads_in_partition l.2184-2194), and at GA > 1 the previous micro-step's one too until the
boundary (all_grad_tensors, l.1038-1040, freed l.1059); with fp32 accumulation on a bf16 model
(_use_compact_grad_partition_buffer l.1259-1266) there is no grads_in_partition but one fp32 buffer of P elements,
P x 4 bytes (_build_compact_grad_partition_buffer l.1268-1274), kept to the step (l.3131), with each reduced slice
cast to fp32 as it is added (l.1324-1326). So at GA 1 the fp32 regime holds at least 4P - 2P = 2P bytes more, and at
GA > 1 at least as much (4P against 2P + 2P). llama-3-8b at W 8: P = ceil(8,030,261,248 / 8) plus padding, at
least 1,003,782,656 elements. Where a neighbouring regime is not modelled (ZeRO-1 on an fp16 model with fp32
accumulation and no optimizer offload) the estimate says its accelerator peak is a lower bound
(``assumptions.peak_lower_bound``, ``>=`` in text).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "sample_configs", "zero2.json")
P = 8_030_261_248 // 8  # elements of a rank's partition, at least (padding only adds)


def _estimate(*sets: str, fmt: str = "json"):
    args = [sys.executable, "-m", "advisor", "estimate", SAMPLE, "--model", "llama-3-8b", "--world-size", "8",
            "--seq-len", "2048", "--set", "train_micro_batch_size_per_gpu=1", "--set", "zero_optimization.stage=2"]
    for s in sets:
        args += ["--set", s]
    p = subprocess.run(args + ["--format", fmt], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout) if fmt == "json" else p.stdout


def _peak(d) -> int:
    return max(r["peak"]["accelerator"]["bytes"] for r in d["ranks"])


FP32 = 'data_types={"grad_accum_dtype":"fp32"}'


def test_modelled_fp32_accumulation_is_not_below_bf16():
    for ga in (1, 8):
        shape = ("zero_optimization.overlap_comm=false", f"gradient_accumulation_steps={ga}", f"train_batch_size={8 * ga}")
        bf16, fp32 = _estimate(*shape), _estimate(*shape, FP32)
        assert bf16["assumptions"]["peak_lower_bound"] is None and fp32["assumptions"]["peak_lower_bound"] is None
        assert _peak(fp32) - _peak(bf16) >= (2 * P if ga == 1 else 0), (ga, _peak(bf16), _peak(fp32))


def test_newcomer_command_is_modelled_with_overlap_comm():
    """The newcomer's exact command (the sample's overlap_comm on, GA 8): overlap_comm adds only the second ipg buffer
    (setup_buckets l.3272-3278) to this regime (engine z2_bf16_gaccfp32_overlap_tbsga2_w2), so the peak is no longer a
    lower bound, and it is not below bf16 accumulation's under the same overlap_comm (4P against 2P + 2P at GA > 1)."""
    shape = ("train_batch_size=64", "gradient_accumulation_steps=8")
    fp32, bf16 = _estimate(*shape, FP32), _estimate(*shape)
    assert fp32["assumptions"]["peak_lower_bound"] is None and bf16["assumptions"]["peak_lower_bound"] is None
    assert _peak(fp32) >= _peak(bf16), (_peak(bf16), _peak(fp32))


def test_coarse_regime_says_lower_bound():
    """Without offload every ZeRO-2 bucket option is modelled (contiguous_gradients off with fp32 communication
    included), and under offload the sample's own settings (overlap_comm on: state.zero12_offload_compact) are too,
    not below bf16 accumulation's peak under the same offload (the compact fp32 partition P x 4 on the accelerator,
    no host buffer, against bf16 accumulation's accelerator gradients), with any communication_data_type: fp32 casts
    every flushed run to 4 bytes (l.2376-2377) beside its flat copy, so its peak is not below the model dtype's. The
    ZeRO-1 on an fp16 model with fp32 accumulation and no offload is modelled in the sample's settings and with any
    communication dtype (state.zero1_compact_grad_accum); the regime still coarse, a 16-bit accumulation dtype unlike
    the model's (bf16 on fp16) at ZeRO-1 without offload (DeepSpeedZeroOptimizer's param.grad_accum copies, l.397-404,
    l.1237; engine probe 2026-12-06: forward:2 +50%), is a lower bound."""
    shape = ("train_batch_size=64", "gradient_accumulation_steps=8")
    OFF = 'zero_optimization.offload_optimizer={"device":"cpu"}'
    fp32, bf16 = _estimate(*shape, FP32, OFF), _estimate(*shape, OFF)
    assert fp32["assumptions"]["peak_lower_bound"] is None and bf16["assumptions"]["peak_lower_bound"] is None
    assert _peak(fp32) >= _peak(bf16), (_peak(bf16), _peak(fp32))
    comm32 = _estimate(*shape, FP32, OFF, "communication_data_type=fp32")
    assert comm32["assumptions"]["peak_lower_bound"] is None and _peak(comm32) >= _peak(fp32)
    Z1FP16 = ("zero_optimization.stage=1", 'bf16={"enabled":false}', 'fp16={"enabled":true}')
    for comm in ((), ("communication_data_type=bf16",), ("communication_data_type=fp32",)):
        assert _estimate(*shape, FP32, *Z1FP16, *comm)["assumptions"]["peak_lower_bound"] is None, comm
    BF16ACC = 'data_types={"grad_accum_dtype":"bf16"}'
    d = _estimate(*shape, BF16ACC, *Z1FP16)
    lb = d["assumptions"]["peak_lower_bound"]
    assert lb and "fp16 model with grad_accum_dtype bf16" in lb and lb in d["assumptions"]["excluded"]
    text = _estimate(*shape, BF16ACC, *Z1FP16, fmt="text")
    assert "accelerator >= " in text and "lower bound" in text
    for extra in (("zero_optimization.contiguous_gradients=false", "communication_data_type=fp32"),
                  ("zero_optimization.contiguous_gradients=false",), ('bf16={"enabled":false}', 'fp16={"enabled":true}'),
                  ("communication_data_type=fp32",)):
        assert _estimate(*shape, FP32, *extra)["assumptions"]["peak_lower_bound"] is None, extra
    assert _estimate(*shape)["assumptions"]["peak_lower_bound"] is None
