"""Worker of test_hf_zero3_load.py, one per rank under torch.distributed.run (DS_ACCELERATOR=cpu,
gloo): the HF Trainer's ZeRO-3 load path of transformers 5 (an HfDeepSpeedConfig alive, as
TrainingArguments(deepspeed=...) makes it, then from_pretrained). It records, on each rank, the
tensors of the state dict _load_pretrained_model hands to _load_state_dict_into_zero3_model: the
bytes of those materialised (not on the meta device), and prints one JSON line per rank."""

import json
import os
import sys

import deepspeed
import torch
import transformers.modeling_utils as mu
from transformers import AutoModelForCausalLM
from transformers.integrations import HfDeepSpeedConfig

ckpt, ds = sys.argv[1], json.loads(sys.argv[2])
deepspeed.init_distributed(dist_backend="gloo")
keep = HfDeepSpeedConfig(ds)  # noqa: F841  (transformers holds a weak reference: keep it alive)
seen: dict = {}
orig = mu._load_state_dict_into_zero3_model


def spy(model, state_dict, load_config=None):
    vals = list(state_dict.values())
    seen["materialised_bytes"] = sum(t.numel() * t.element_size() for t in vals if t.device.type != "meta")
    seen["meta_tensors"] = sum(1 for t in vals if t.device.type == "meta")
    seen["tensors"] = len(vals)
    return orig(model, state_dict, load_config)


mu._load_state_dict_into_zero3_model = spy
model = AutoModelForCausalLM.from_pretrained(ckpt)
seen["rank"] = torch.distributed.get_rank()
seen["numel"] = sum(p.ds_numel for p in model.parameters())
# one write of the whole line (under PIPE_BUF, so atomic on the shared pipe): print(..., flush=True) writes
# the text and its newline separately, and the two ranks' lines interleaved once in CI ("{...}HFZ3 {...}")
sys.stdout.write("HFZ3 " + json.dumps(seen) + "\n")
sys.stdout.flush()
# Leave together: a rank that exits while the other's gloo threads still talk to it ends in
# "terminate called without an active exception" (SIGABRT, seen once in a clean-clone CI run).
torch.distributed.barrier()
torch.distributed.destroy_process_group()
# and skip the interpreter's shutdown: the abort came back in the next clean-clone CI (2026-12-07 10:13, rank 0
# exit -6 after its record was written) with the barrier and destroy above; it is raised while C++ destructors run
# at exit with a thread still joinable, which os._exit does not run (as superoffload_nvme_worker.py does)
sys.stderr.flush()
os._exit(0)
