"""ZeRO-3 with parameters on NVMe at GA > 1: micro-step 2's forward re-fetches, in one coalesced all-gather per
module, the persistent parameters the first backward released with the module's others
(state.zero3_nvme_refetch_bytes). Values by hand from partition_parameters.py's flat buffer (sum ceil(n_i/W) x W x D,
_all_gather_dtype l. 1343); the engine shows the same in tests/engine/test_peak_parity.py z3_bf16_op_nvme_tbsga2_w2
(forward:2 +2,123,881 B without it)."""
import types

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.ledger.timeline import resolve_load, role_timeline
from advisor.model.inventory import Inventory, TensorSpec

#: tests/engine/parity.py's BIG: Linear(1024, 1031) -> Linear(1031, 1029)
BIG = [("l1.weight", (1031, 1024)), ("l1.bias", (1031,)), ("l2.weight", (1029, 1031)), ("l2.bias", (1029,))]


def _inv(shapes=BIG) -> Inventory:
    return Inventory("big", [TensorSpec(n, s) for n, s in shapes])


def _zero(seq: bool = False, threshold: int = 100000):
    return types.SimpleNamespace(param_persistence_threshold=threshold, model_persistence_threshold=10**18,
                                 allgather_sequential=seq)


def test_second_module_coalesced_refetch():
    # biases persistent (<= 1e5 elements); l1 is the first module (its persistent bias kept): l2's buffer
    assert state.zero3_nvme_refetch_bytes(_inv(), _zero(), 2, 2)[0] == (530450 + 515) * 2 * 2 == 2123860
    # W = 4: ceil(1,060,899 / 4) x 4 + ceil(1,029 / 4) x 4 elements, fp32
    assert state.zero3_nvme_refetch_bytes(_inv(), _zero(), 4, 4)[0] == (265225 * 4 + 258 * 4) * 4


def test_no_coalesced_refetch():
    assert state.zero3_nvme_refetch_bytes(_inv(), _zero(seq=True), 2, 2)[0] == 0  # each gathered alone
    assert state.zero3_nvme_refetch_bytes(_inv(), _zero(threshold=0), 2, 2)[0] == 0  # nothing was persistent
    # one parameter per module: a view of its own buffer
    assert state.zero3_nvme_refetch_bytes(_inv([("a.w", (2000,)), ("b.w", (3000,))]), _zero(), 2, 2)[0] == 0


def _ledger(tbs: int):
    cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": tbs, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp",
                                                                "buffer_count": 5, "buffer_size": 1100000,
                                                                "max_in_cpu": 1000}}}
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, _inv(), Cluster(world_size=2)))
    return ec, led


def test_only_micro_step_2s_forward():
    for tbs, ga in ((2, 1), (4, 2), (6, 3)):
        ec, led = _ledger(tbs)
        e = [x for x in led.rank(0).entries if x.item == "zero3_nvme_refetch"]
        assert [x.bytes for x in e] == ([] if ga == 1 else [2123860]), ga
        if ga > 1:
            tl = role_timeline(led, led.rank(0), resolve_load(ec, zero_init=True, dtype=None), ga=ga, rank=0)
            live = [x.key for i, x in enumerate(tl.instants) if any(r[0] == "zero3_nvme_refetch" for r in tl.entries[i])]
            assert live == ["forward:2"], (ga, live)
