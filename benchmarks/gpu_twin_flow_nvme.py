"""GPU check of ZeRO-3 partial optimizer offload to NVMe (``offload_optimizer: {device: nvme, ratio: r}``,
issue 15): which sub-groups DeepSpeed 0.19.8 swaps, which the backup torch AdamW steps, where that optimizer's
state lives and which swap files exist, for advisor.ledger.state.twin_flow_backup_swapped.

One process, world size 1, bf16, parity.BIG's layers (Linear 1024->1031->1029), sub_group_size 300,000 (three
sub-groups: [1,055,744], [1,031 + 1,060,899], [1,029]; the first two over the 1 MiB aio swap size), two steps.
Usage: ``python3 benchmarks/gpu_twin_flow_nvme.py RATIO OUT.json NVME_DIR``. On DeepSpeed's CPU accelerator
(DS_ACCELERATOR=cpu) it runs too and shows the CPU path (every sub-group maps to 'cpu', DeepSpeedCPUAdam steps all).

Run on the device tool's H100 (2026-12-06, torch 2.11.0+cu130): DeepSpeed 0.19.8's package copied from the
development machine, the wheels of benchmarks/gpu_peak_wheels.sh but deepspeed's, libaio.so.1 and libaio.h carried
(CPATH / LIBRARY_PATH / LD_LIBRARY_PATH / CFLAGS / LDFLAGS pointing at them, for the async_io JIT build) and
TORCH_CUDA_ARCH_LIST=9.0 (the image's '9.0a' breaks op_builder/builder.py l.710's int() parse).
Results: benchmarks/results/gpu_twin_flow_nvme-h100.json; tests/test_twin_flow_nvme.py compares the ledger with them.
"""
import os, sys, json, glob, time
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29511")
os.environ.setdefault("RANK", "0"); os.environ.setdefault("WORLD_SIZE", "1"); os.environ.setdefault("LOCAL_RANK", "0")
import torch, deepspeed
ratio = float(sys.argv[1]); out = sys.argv[2]; nv = sys.argv[3]
os.makedirs(nv, exist_ok=True)
class M(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.l1 = torch.nn.Linear(1024, 1031); s.l2 = torch.nn.Linear(1031, 1029)
    def forward(s, x): return s.l2(s.l1(x)).float().pow(2).mean()
cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
       "bf16": {"enabled": True},
       "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000, "sub_group_size": 300000,
                             "offload_optimizer": {"device": "nvme", "nvme_path": nv, "buffer_count": 4, "ratio": ratio}}}
t0 = time.time()
eng, opt, _, _ = deepspeed.initialize(model=M(), model_parameters=None, config=cfg)
zo = eng.optimizer
rec = {"ratio": ratio, "init_s": time.time() - t0}
for step in range(2):
    x = torch.randn(1, 1024, device=deepspeed.accelerator.get_accelerator().device_name(), dtype=torch.bfloat16)
    loss = eng(x); eng.backward(loss); eng.step()
fl = zo.fp32_partitioned_groups_flat
rec["sub_groups"] = [int(n) for n in zo.fp16_partitioned_groups_flat_numel]
rec["subgroup_to_device"] = {str(k): v for k, v in zo.subgroup_to_device.items()}
rec["swappable"] = [bool(zo._swappable_optimizer_subgroup(i)) for i in range(len(fl))]
rec["fp32_master"] = [{"device": str(t.device), "numel": t.numel()} for t in fl]
def st(o, p):
    s = o.state.get(p, {})
    return {k: ({"device": str(v.device), "numel": v.numel(), "dtype": str(v.dtype), "pinned": bool(v.is_pinned()) if v.device.type == "cpu" else None} if torch.is_tensor(v) else repr(v)) for k, v in s.items()}
rec["backup_state"] = [st(zo.backup_optimizer, p) for p in fl]
rec["cpuadam_state"] = [st(zo.optimizer, p) for p in fl]
rec["swap_files"] = sorted((os.path.relpath(f, nv), os.path.getsize(f)) for f in glob.glob(nv + "/**/*.swp", recursive=True))
rec["cuda_alloc"] = torch.cuda.memory_allocated() if torch.cuda.is_available() else None
json.dump(rec, open(out, "w"), indent=1)
print(json.dumps(rec)[:3000])
