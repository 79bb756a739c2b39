"""ZeRO-1/2 under optimizer offload runs with ``contiguous_gradients`` on whatever the config says: DeepSpeed 0.19.8
``runtime/zero/stage_1_and_2.py`` l.220-222 sets ``self.cpu_offload = True`` for any ``offload_optimizer.device`` other
than none and l.299-300 ("CPU-Offload requires contiguous gradients") ``self.contiguous_gradients =
contiguous_gradients or self.cpu_offload``; every later read is of ``self.contiguous_gradients`` (setup_buckets' ipg
buffer, the hook's copy into it or the clone of a gradient over the bucket, l.1441-1446, copy_grads_in_partition
l.2272). ZeRO-3 keeps the written value (``stage3.py`` l.428). So a written ``false`` under offload must give the ledger
of ``true`` (EffectiveConfig.contiguous_gradients_effective). Engine: tests/engine/test_peak_parity.py
z1_bf16_noncontig_oo_cpu_tbsga2_w2 (before, the ledger took the written false: backward:2 +86,454 B, 15.2%).
With ``grad_accum_dtype`` fp32 under offload the fp32 gradient regime is modelled only with one param group and
``overlap_comm`` off (ZeRO-1 and ZeRO-2) (state.zero12_offload_fp32_accum; the same file's z1_bf16_noncontig_oo_cpu_gaccfp32_tbsga2_w2
was +12-36% from backward:1 on before); elsewhere the estimate must say its peak is a lower bound."""

from __future__ import annotations

import re
from importlib.util import find_spec
from pathlib import Path

import pytest

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.ledger.timeline import resolve_load, role_timeline
from advisor.model.inventory import Inventory, TensorSpec

#: TINY's tensors (tests/engine/parity.py), flat: l1.weight and l2.weight over a 10,000-element bucket
TINY = Inventory(name="tiny", tensors=[TensorSpec(f"l{i}.w", (n,)) for i, n in
                                       enumerate([19264, 301, 23177, 77, 385, 5])], source="test")


def _cfg(stage, contiguous, device="cpu", ga=1, overlap=False, gacc=None):
    c = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "bf16": {"enabled": True},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
         "zero_optimization": {"stage": stage, "reduce_bucket_size": 10000, "overlap_comm": overlap,
                               "contiguous_gradients": contiguous, "offload_optimizer": {"device": device}}}
    if gacc:
        c["data_types"] = {"grad_accum_dtype": gacc}
    return c


def test_deepspeed_forces_contiguous_gradients_under_offload():
    spec = find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("deepspeed is not installed: the source fact cannot be read")
    root = Path(list(spec.submodule_search_locations)[0]) / "runtime" / "zero"
    src = (root / "stage_1_and_2.py").read_text()
    assert re.search(r"offload_optimizer_config\.device != OffloadDeviceEnum\.none:\n\s+self\.cpu_offload = True", src)
    assert "self.contiguous_gradients = contiguous_gradients or self.cpu_offload" in src
    assert "self.contiguous_gradients = contiguous_gradients\n" in (root / "stage3.py").read_text()
    for stage in (1, 2, 3):
        for device in ("none", "cpu", "nvme"):
            for written in (True, False):
                ec = effective_config(_cfg(stage, written, device))
                want = written or (stage in (1, 2) and device != "none")
                assert ec.contiguous_gradients_effective == want, (stage, device, written)
                assert ec.zero.contiguous_gradients == written  # DeepSpeedZeroConfig's value, as written


def _series(cfg, r):
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, TINY, Cluster(world_size=2)))
    tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=ec.gradient_accumulation_steps or 1, rank=r)
    return [x.key for x in tl.instants], tl.series(("accelerator",)), led


@pytest.mark.parametrize("stage", (1, 2))
@pytest.mark.parametrize("ga", (1, 2))
@pytest.mark.parametrize("overlap", (False, True))
def test_written_false_under_offload_is_the_contiguous_ledger(stage, ga, overlap):
    for r in (0, 1):
        off = _series(_cfg(stage, False, ga=ga, overlap=overlap), r)
        on = _series(_cfg(stage, True, ga=ga, overlap=overlap), r)
        assert off[:2] == on[:2], (stage, ga, overlap, r)
    # the ipg bucket setup_buckets allocates under self.contiguous_gradients: RBS x 2 B (bf16), x 2 with overlap_comm
    led = off[2]
    assert sum(e.bytes for e in led.rank(0).by_item("ipg_bucket")) == 10000 * 2 * (2 if overlap else 1)


@pytest.mark.parametrize("stage", (1, 2))
@pytest.mark.parametrize("ga", (1, 2))
@pytest.mark.parametrize("overlap", (False, True))
def test_fp32_accumulation_under_offload_modelled_either_way(stage, ga, overlap):
    # modelled with overlap_comm on or off (state.zero12_offload_fp32_accum / zero12_offload_compact; engine cells
    # z1/z2_bf16_noncontig_oo_cpu_gaccfp32[_overlap]_tbsga2_w2, tests/test_offload_fp32_accum.py), and
    # contiguous_gradients as written does not matter: DeepSpeed forces it on under offload (l.299-300)
    for r in (0, 1):
        off = _series(_cfg(stage, False, ga=ga, overlap=overlap, gacc="fp32"), r)
        on = _series(_cfg(stage, True, ga=ga, overlap=overlap, gacc="fp32"), r)
        assert off[:2] == on[:2], (stage, ga, overlap, r)
        assert not off[2].peak_lower_bound


@pytest.mark.parametrize("ga,overlap", ((2, True), (1, True), (2, False)))
@pytest.mark.parametrize("comm", ("fp32", "fp16"))
def test_fp32_accumulation_under_offload_other_comm_zero2_is_modelled(ga, overlap, comm):
    # ZeRO-2 with a communication_data_type unlike the model's in this regime: modelled (state.zero12_offload_compact,
    # engine probes within 0.16%), contiguous_gradients forced on as everywhere under offload (l.299-300)
    for r in (0, 1):
        got = []
        for contiguous in (True, False):
            cfg = _cfg(2, contiguous, ga=ga, overlap=overlap, gacc="fp32")
            cfg["communication_data_type"] = comm
            got.append(_series(cfg, r))
            assert not got[-1][2].peak_lower_bound
        assert got[0][:2] == got[1][:2], (ga, overlap, comm, r)
