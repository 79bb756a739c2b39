"""Step time of SuperOffload and of ZeRO-3 partial optimizer offload (Twin-Flow), by hand (issue 23).

Every expected figure below is computed here from the DeepSpeed 0.19.8 / torch rule it cites, on a
four-layer toy model whose numbers can be followed on paper:

* four trainable tensors ``l0.weight`` .. ``l3.weight`` of N elements each, one module each, one rank
  (W = 1), ``sub_group_size`` N: ``stage3.py`` _create_fp16_sub_groups closes a sub-group once its
  running sum reaches N, so each tensor is its own sub-group (also SuperOffload's override,
  ``superoffload_stage3.py`` l.78-90);
* ``reduce_bucket_size`` N: backward delivers l3, l2, l1, l0 (modules in reverse); a gradient that
  would take a non-empty bucket past N flushes it first (``stage3.py`` l.1583-1585), so l3's
  sub-group is partitioned when l2 arrives (a quarter of backward's gradient elements), l2's at a
  half, l1's at three quarters and l0's in the epilogue (the end);
* bf16, tokens per step 1000, peak 1e12 FLOP/s x MFU 0.4: backward compute 4 x 4N x 1000 / 4e11 s
  (Kaplan 4 N per token backward); the gradients' PCIe copies beside it are far shorter.
"""

from __future__ import annotations

import pytest

from advisor.cluster.hardware import from_dict
from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan
from advisor.ledger.steptime import breakdown_lines, step_time, sub_group_ready_fractions, super_offload_tail
from advisor.model.inventory import Inventory, TensorSpec

N = 4_194_304
B = 4 * 4 * N * 1000 / (1e12 * 0.4)  # the backward window: compute alone (4 N_active T / (peak x MFU))
ADAM, GRAD_COPY, UNSCALE, COPY16 = 28, 8, 8, 6  # cpu_adam.h Step_AVX; superoffload_utils l.133-134; stage3 l.2988; 4 + 2


def _hw(host_bw: float = 1e10, hbm: float = 1e11, cores: dict | None = None) -> object:
    d = {"nodes": 1, "accelerators_per_node": 1, "host_memory_bandwidth_bytes_per_s": host_bw,
         "accelerator": {"name": "toy", "memory_bytes": 1e11, "peak_bf16_flops": 1e12,
                         "memory_bandwidth_bytes_per_s": hbm, "host_link": {"bytes_per_s": 1e10}}}
    d.update(cores or {})
    return from_dict(d)


def _plan(super_offload: bool = True, clipping: float = 0.0, ratio: float = 1.0, ga: int = 1,
          offload_param: str = "none", optimizer: dict | None = None, **offload) -> Plan:
    inv = Inventory("four", [TensorSpec(f"l{i}.weight", (N,), trainable=True) for i in range(4)])
    raw = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "bf16": {"enabled": True},
           "gradient_clipping": clipping,
           "zero_optimization": {"stage": 3, "sub_group_size": N, "reduce_bucket_size": N,
                                 "offload_param": {"device": offload_param},
                                 "offload_optimizer": {"device": "cpu", "super_offload": super_offload,
                                                       "ratio": ratio, **offload}}}
    if optimizer:
        raw["optimizer"] = optimizer
    return Plan(effective_config(raw), inv, Cluster(world_size=1, gpus_per_node=1))


def _term(st, name):
    return next(t for t in st.terms if t.name == name)


def test_sub_groups_are_ready_at_the_flush_of_their_last_gradient_by_hand():
    # l0 .. l3 in DeepSpeed's sub-group order; l3 flushed when l2 arrives (N of 4N delivered), ...
    assert sub_group_ready_fractions(_plan()) == [1.0, 0.75, 0.5, 0.25]


def test_worker_queue_tail_by_hand():
    # one worker, FIFO: ready 1, 2, 3 s, 1.5 s each, backward ends at 3 s:
    # finishes 2.5, max(2.5, 2) + 1.5 = 4.0, max(4.0, 3) + 1.5 = 5.5 -> 2.5 s past backward
    assert super_offload_tail([3.0, 1.0, 2.0], [1.5, 1.5, 1.5], 3.0) == pytest.approx(2.5)
    # a worker faster than the flushes: only the last sub-group's own step is left
    assert super_offload_tail([1.0, 2.0, 3.0], [0.5, 0.5, 0.5], 3.0) == pytest.approx(0.5)
    assert super_offload_tail([1.0], [0.5], 3.0) == 0.0


@pytest.mark.parametrize("host_bw", [1e10, 1e9])
def test_superoffload_critical_path_by_hand(host_bw):
    """gradient_clipping 0: the worker copies and steps each sub-group (8 + 28 B per element) from its
    flush on, beside backward (superoffload_stage3.py l.167-181); step() waits for the rest (l.200), then
    unscales and copies back (l.239-246: 8 + 6 B). With clipping (l.248-268) all of it after backward."""
    c = N * (GRAD_COPY + ADAM) / host_bw  # one sub-group in the worker
    ready = [B / 4, B / 2, 3 * B / 4, B]
    t = 0.0
    for r in ready:
        t = max(t, r) + c
    tail = t - B
    if host_bw == 1e10:
        assert c < B / 4 and tail == pytest.approx(c, rel=1e-9)  # only l0's own step is left
    else:
        assert c > B / 4 and tail == pytest.approx(B / 4 + 4 * c - B, rel=1e-9)  # the worker is the bottleneck
    sync = 4 * N * (UNSCALE + COPY16) / host_bw
    hw = _hw(host_bw)
    st = step_time(_plan(), hw, seq_len=1000)
    assert st.windows["backward"] == pytest.approx(B, rel=1e-12)
    asyn, cpu = _term(st, "cpu_optimizer_async"), _term(st, "cpu_optimizer")
    assert asyn.amount == 4 * N * (GRAD_COPY + ADAM) and asyn.phase == "backward"
    assert asyn.seconds == pytest.approx(4 * c, rel=1e-12)
    assert asyn.exposed == pytest.approx(tail, rel=1e-9)
    assert cpu.amount == 4 * N * (UNSCALE + COPY16) and cpu.exposed == pytest.approx(sync, rel=1e-12)
    assert st.windows["step"] == pytest.approx(sync + tail, rel=1e-9)
    so = st.assumptions["super_offload"]
    assert so["hidden_seconds"] == pytest.approx(4 * c - tail, rel=1e-9)
    assert so["exposed_seconds"] == pytest.approx(tail, rel=1e-9)
    # with clipping nothing is hidden: every byte after backward, the rest of the step unchanged
    clipped = step_time(_plan(clipping=1.0), hw, seq_len=1000)
    cc = _term(clipped, "cpu_optimizer")
    assert cc.amount == 4 * N * (GRAD_COPY + ADAM + UNSCALE + COPY16)
    assert clipped.windows["step"] == pytest.approx(4 * c + sync, rel=1e-9)
    assert clipped.total - st.total == pytest.approx(4 * c - tail, rel=1e-9)
    lines = "\n".join(breakdown_lines(st))
    assert "SuperOffload CPU step in the boundary's backward" in lines and "hidden" in lines
    assert "nothing hidden" in "\n".join(breakdown_lines(clipped))


def test_superoffload_hides_only_behind_the_boundary_micro_steps_backward_by_hand():
    """At GA 2 the window holds two backward passes, but partition_grads submits sub-groups only at the
    accumulation boundary (superoffload_stage3.py l.167): the worker runs beside the last one, B each."""
    host_bw = 1e9
    c = N * (GRAD_COPY + ADAM) / host_bw
    st = step_time(_plan(ga=2), _hw(host_bw), seq_len=1000)
    assert st.windows["backward"] == pytest.approx(2 * B, rel=1e-12)
    assert st.assumptions["super_offload"]["boundary_backward_s"] == pytest.approx(B, rel=1e-12)
    assert _term(st, "cpu_optimizer_async").exposed == pytest.approx(B / 4 + 4 * c - B, rel=1e-9)


def test_superoffload_worker_and_training_process_split_the_cores_by_hand():
    """_set_cpu_affinity (superoffload_utils.py l.219-228): split = int((1 - perc) x n), the training
    process gets the first split cores, the worker the rest. One rank per node, 16 cores, OMP unset:
    16 threads; 5e9 B/s a core, 1e11 B/s the node. perc 0.8: split int(3.2) = 3 -> worker 13 cores,
    min(1e11, 13 x 5e9) = 6.5e10; main min(1e11, 3 x 5e9) = 1.5e10. perc 0.5: 8 and 8 -> 4e10 each."""
    cores = {"host_cores_per_node": 16, "host_core_bandwidth_bytes_per_s": 5e9}
    for perc, worker, main in ((0.8, 6.5e10, 1.5e10), (0.5, 4e10, 4e10)):
        plan = _plan(cpuadam_cores_perc=perc)
        assert plan.config.zero.offload_optimizer.cpuadam_cores_perc == perc
        st = step_time(plan, _hw(1e11, cores=cores), seq_len=1000)
        so = st.assumptions["super_offload"]
        assert (so["worker_bytes_per_s"], so["main_bytes_per_s"]) == (worker, main)
        assert _term(st, "cpu_optimizer_async").seconds == pytest.approx(4 * N * 36 / worker, rel=1e-12)
        assert _term(st, "cpu_optimizer").seconds == pytest.approx(4 * N * 14 / main, rel=1e-12)


@pytest.mark.parametrize("weight_decay,per_elem", [(0.0, 72 + 8 + 6), (0.01, 72 + 8 + 8 + 6)])
def test_twin_flow_backup_adamw_step_by_hand(weight_decay, per_elem):
    """ratio 0.5 over 4 sub-groups: int(0.5 x 4) = 2 (l0, l1) on the accelerator (stage3.py l.1100-1108),
    stepped by the backup torch AdamW (l.1249-1258). Its foreach step streams per element lerp_ 12, mul_ 8,
    addcmul_ 12, sqrt 8, div_ 8, add_ 8, addcdiv_ 16 = 72 B (torch/optim/adam.py _multi_tensor_adam),
    weight decay 8 more (l.688-691), plus the unscale pass 8 and the bf16 copy 4 + 2 (stage3.py l.2988,
    l.2857). HBM 1e10 B/s here so that it shows: g = 2N x per_elem / 1e10. The loop enqueues it first and
    goes on; the first host sub-group's blocking copy back to the GPU waits for it, after that sub-group's
    unscale + Adam (N x 36 / 1e10): exposed g - that. With the 16-bit partitions on the host
    (offload_param cpu) nothing on the CPU side waits: exposed g - the whole CPU step (2N x 42 / 1e10)."""
    opt = {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": weight_decay}}
    hw = _hw(1e10, hbm=1e10)
    g = 2 * N * per_elem / 1e10
    for param, hide in (("none", N * (ADAM + UNSCALE) / 1e10), ("cpu", 2 * N * (ADAM + UNSCALE + COPY16) / 1e10)):
        st = step_time(_plan(super_offload=False, clipping=1.0, ratio=0.5, offload_param=param, optimizer=opt), hw,
                       seq_len=1000)
        gpu, cpu = _term(st, "gpu_optimizer"), _term(st, "cpu_optimizer")
        assert gpu.resource == "accelerator_memory" and gpu.amount == 2 * N * per_elem
        assert gpu.seconds == pytest.approx(g, rel=1e-12)
        assert cpu.amount == 2 * N * (ADAM + UNSCALE + COPY16)
        assert gpu.exposed == pytest.approx(g - hide, rel=1e-9)
        assert st.windows["step"] == pytest.approx(cpu.seconds + g - hide, rel=1e-9)
    # a fast HBM (1e11 B/s): g = 2N x per_elem / 1e11 < N x 36 / 1e10, hidden in full
    st = step_time(_plan(super_offload=False, clipping=1.0, ratio=0.5, optimizer=opt), _hw(1e10, hbm=1e11),
                   seq_len=1000)
    assert _term(st, "gpu_optimizer").exposed == 0.0
    assert any("GPU optimizer step" in ln for ln in breakdown_lines(st))


def test_twin_flow_under_superoffload_hides_the_gpu_step_behind_the_unscale_only_by_hand():
    """SuperOffload without clipping, ratio 0.5: l2, l3 on the host, both ready by half of backward and
    stepped by the worker beside it (2 x N x 36 / 1e10 < B / 2: nothing exposed); after backward the loop
    (l.239-246) runs the backup AdamW of l0, l1 (2N x 86 B at 1e10) and, before l2's blocking copy back,
    only l2's unscale (N x 8 / 1e10) hides it."""
    st = step_time(_plan(ratio=0.5), _hw(1e10, hbm=1e10), seq_len=1000)
    g = 2 * N * 86 / 1e10
    assert _term(st, "cpu_optimizer_async").exposed == 0.0
    assert _term(st, "gpu_optimizer").exposed == pytest.approx(g - N * UNSCALE / 1e10, rel=1e-9)
    assert st.windows["step"] == pytest.approx(2 * N * (UNSCALE + COPY16) / 1e10 + g - N * UNSCALE / 1e10, rel=1e-9)


def test_gpu_optimizer_without_hbm_bandwidth_is_unknown():
    hw = from_dict({"nodes": 1, "accelerators_per_node": 1, "host_memory_bandwidth_bytes_per_s": 1e10,
                    "accelerator": {"name": "toy", "memory_bytes": 1e11, "peak_bf16_flops": 1e12,
                                    "host_link": {"bytes_per_s": 1e10}}})
    st = step_time(_plan(super_offload=False, ratio=0.5), hw, seq_len=1000)
    assert _term(st, "gpu_optimizer").seconds is None
    assert any(u.startswith("gpu_optimizer") for u in st.unknown)


def test_lint_knows_the_superoffload_keys(tmp_path):
    """Both keys are DeepSpeedZeroOffloadOptimizerConfig fields (offload_config.py l.102-106): no
    unknown-key finding, and a misspelling is one."""
    import json

    from advisor.config.loading import load_config
    from advisor.views.lint import lint_config
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": True,
                                                                    "cpuadam_cores_perc": 0.6}}}
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(cfg))
    found = [(f.code, f.pointer) for f in lint_config(load_config(str(p)))]
    assert not any("super_offload" in ptr or "cpuadam" in ptr for _, ptr in found), found
    cfg["zero_optimization"]["offload_optimizer"]["cpuadam_core_perc"] = 0.6
    p.write_text(json.dumps(cfg))
    found = [(f.code, f.pointer) for f in lint_config(load_config(str(p)))]
    assert ("S001", "/zero_optimization/offload_optimizer/cpuadam_core_perc") in found, found  # unknown key


def test_report_redraws_both_lines_in_its_units():
    """estimate stores the breakdown in GiB; the text and HTML reports redraw the sized lines in --units:
    the HBM rate 1e11 B/s is 100.0 GB/s (93.1 GiB/s), the worker's 1e10 B/s 10.0 GB/s (9.3 GiB/s)."""
    from advisor.render.text import step_time_lines
    st = step_time(_plan(ratio=0.5), _hw(1e10, hbm=1e11), seq_len=1000)
    stt = st.to_dict()
    stt["lines"] = breakdown_lines(st)
    gib = [ln for ln in stt["lines"] if "backup AdamW" in ln or "SuperOffload CPU step" in ln]
    assert len(gib) == 2 and "93.1 GiB/s" in gib[0] + gib[1] and "9.3 GiB/s" in gib[0] + gib[1]
    gb = [ln for ln in step_time_lines(stt, units="GB") if "backup AdamW" in ln or "SuperOffload CPU step" in ln]
    assert len(gb) == 2 and "100.0 GB/s" in gb[0] + gb[1] and "10.0 GB/s" in gb[0] + gb[1]
    assert "GiB" not in gb[0] + gb[1]
