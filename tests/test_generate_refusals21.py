"""Issue 21, genmsg21: generate refuses, before the search (exit 2, one line), a request no plan can
express whatever the memory, naming the real cause (newcomer defects 1-3). Before, these ran the
search, found nothing and said "no plan fits ... a smaller model" (exit 1), or, through suggest()'s
data-parallel re-searches, "--pipeline-parallel 2: not a layout ... on 16 ranks ... --no-model-parallel
is set" (neither true).

Expected values, by hand:

* gpt2 has 12 layers (transformers GPT2Config n_layer = 12). A pipeline stage of p holds at most
  ceil(12 / p) layers: DeepSpeed ``runtime/utils.py`` partition_uniform (l. 606-624) gives chunks of
  12 // p plus one for the first 12 % p parts: p = 2 -> 6, p = 4 -> 3, p = 1 -> 12.
* Micro-batches: ``runtime/config.py`` _batch_assertion (l. 590-605) train_batch = micro x GA x DP,
  so a micro-batch divides global / DP sequences per rank. On 1 x 8 with --global-batch 64 the
  layouts generate writes for gpt2 (TP divides 8 and gpt2's 12 heads -> 1, 2, 4; PP divides 12;
  T x P divides 8; Ulysses u divides 8 and 12 heads -> 2, 4) have T x P x U in {1, 2, 4, 8}, so
  DP = 8, 4, 2, 1 and 8, 16, 32, 64 sequences per rank; their divisors are 1, 2, 4, 8, 16, 32, 64,
  and 3 divides none. Data parallel only (--no-model-parallel): 8 per rank, divisors 1, 2, 4, 8.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import run_cli

GEN = ["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
       "--seq-len", "128", "--global-batch", "64"]
GPT2_LAYERS = 12  # transformers GPT2Config.n_layer


def _one_line_refusal(p, *words):
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("ds-advisor:")]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    for wrong in ("no plan fits", "smaller model", "16 ranks", "--no-model-parallel is set"):
        assert wrong not in p.stderr, (wrong, p.stderr)
    return lines[0]


@pytest.mark.parametrize("k,pp", [(7, 2), (4, 4)])
def test_checkpointing_past_a_stage_names_layers_per_stage(k, pp):
    per_stage = math.ceil(GPT2_LAYERS / pp)  # partition_uniform: 6 for p = 2, 3 for p = 4
    p = run_cli([*GEN, "--checkpointing", str(k), "--pipeline-parallel", str(pp)])
    line = _one_line_refusal(p, f"--checkpointing {k}", f"gpt2 has {GPT2_LAYERS} layers",
                             f"{per_stage} per pipeline stage (pipeline parallel {pp})", f"give at most {per_stage}")
    # the same words estimate says for that input (one check, advisor.model.activations.checkpointing_problem)
    est = run_cli(["estimate", "-", "--model", "gpt2", "--world-size", "8", "--gpus-per-node", "8", "--seq-len",
                   "128", "--checkpointing", str(k), "--pipeline-parallel", str(pp)],
                  stdin=json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                    "zero_optimization": {"stage": 1}}))
    assert est.returncode == 2, est.stderr[-2000:]
    assert line.split(": ", 2)[2] in est.stderr


@pytest.mark.parametrize("k", [13, 999])
def test_checkpointing_past_the_layers(k):
    p = run_cli([*GEN, "--checkpointing", str(k)])
    _one_line_refusal(p, f"--checkpointing {k}", f"gpt2 has {GPT2_LAYERS} layers", f"give at most {GPT2_LAYERS}")


def test_micro_batch_dividing_no_layout_names_the_usable_sizes():
    p = run_cli([*GEN, "--micro-batch", "3"])
    line = _one_line_refusal(p, "--micro-batch 3", "8, 16, 32, 64 per rank")
    assert line.endswith("use 1, 2, 4, 8, 16, 32 or 64"), line
    p = run_cli([*GEN, "--micro-batch", "16", "--no-model-parallel"])  # 16 > 8 per rank data parallel
    line = _one_line_refusal(p, "--micro-batch 16", "8 per rank")
    assert line.endswith("use 1, 2, 4 or 8"), line


def _best(args):
    p = run_cli([*GEN, *args, "--format", "json"])
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)["plans"][0]  # best first


def test_neighbouring_valid_inputs_still_run():
    b = _best(["--checkpointing", "6", "--pipeline-parallel", "2"])  # exactly a stage's layers
    assert (b["pipeline_parallel"], b["checkpointing"]) == (2, "6")
    b = _best(["--checkpointing", str(GPT2_LAYERS)])
    assert b["checkpointing"] == str(GPT2_LAYERS)
    b = _best(["--micro-batch", "4"])
    assert b["micro_batch"] == 4
    # 16 divides no data-parallel per-rank count (8) but TP/PP layouts' (16, 32, 64): not refused
    b = _best(["--micro-batch", "16"])
    assert b["micro_batch"] == 16
    assert b["tensor_parallel"] * b["pipeline_parallel"] * b["sequence_parallel"] >= 2


def test_memory_miss_with_a_fixed_degree_keeps_it_in_the_suggestions():
    # The same false line came from suggest() whenever nothing fit with a degree given: its
    # re-searches dropped model parallelism (model_parallel=False) but kept --pipeline-parallel 2, and
    # search refused that as "--no-model-parallel is set" (exit 2). Qwen2.5-32B with PP 2 on 1 x 2
    # H100 fits no plan (PP takes ZeRO-0/1 only, rule G001): exit 1, the suggestion keeping PP 2.
    p = run_cli(["generate", "--model", "qwen2.5-32b", "--hardware", "dgx-h100", "--nodes", "1",
                 "--gpus-per-node", "2", "--seq-len", "4096", "--global-batch", "64", "--pipeline-parallel", "2"],
                timeout=600)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "no plan fits qwen2.5-32b on 1 x 2" in p.stderr
    assert "--no-model-parallel is set" not in p.stderr and "not a layout" not in p.stderr
    assert "--pipeline-parallel 2 fixed" in " ".join(p.stderr.split())


# --- newcomer D1-D3 (gm2): the layout refusal before the --checkpointing / --micro-batch checks, and the
# global batch counted per layout. By hand: llama-3-8b has 32 layers (LlamaConfig num_hidden_layers), so
# PP 3 divides none of its layers into equal stages (model_parallel_layouts: p divides the layers); gpt2's
# 12 layers: PP 5 does not divide them, PP 16 neither (and 16 stages on 8 ranks: T x P divides no world).

LAYOUT = "not a layout generate can write"


@pytest.mark.parametrize("args,flag", [
    (["--model", "llama-3-8b", "--gpus-per-node", "6", "--global-batch", "12", "--seq-len", "2048",
      "--pipeline-parallel", "3", "--checkpointing", "12"], "--pipeline-parallel 3"),
    (["--model", "llama-3-8b", "--gpus-per-node", "6", "--global-batch", "12", "--seq-len", "2048",
      "--pipeline-parallel", "3", "--checkpointing", "11"], "--pipeline-parallel 3"),
    (["--model", "gpt2", "--gpus-per-node", "8", "--global-batch", "64", "--seq-len", "128",
      "--pipeline-parallel", "5", "--checkpointing", "4"], "--pipeline-parallel 5"),
    (["--model", "gpt2", "--gpus-per-node", "8", "--global-batch", "64", "--seq-len", "128",
      "--pipeline-parallel", "16", "--checkpointing", "2"], "--pipeline-parallel 16"),
])
def test_layout_refusal_comes_before_the_checkpointing_check(args, flag):
    p = run_cli(["generate", "--hardware", "dgx-h100", "--nodes", "1", *args])
    line = _one_line_refusal(p, f"{flag}: {LAYOUT}")
    assert "give at most" not in line and "per pipeline stage" not in line, line


def test_global_batch_counts_the_data_parallel_ranks_of_the_fixed_layout():
    # PP 2 on 1 x 8 for gpt2: layouts (T, 2) with T in 1, 2, 4 (T divides 8 and 12 heads; T x 2 divides 8),
    # DP = 8 / (2T) = 4, 2, 1; 12 = 3 x 4 is a multiple of all: runs (not "data-parallel size 8 ... use 8 or 16")
    p = run_cli(["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
                 "--global-batch", "12", "--seq-len", "1024", "--pipeline-parallel", "2", "--format", "json"])
    assert p.returncode == 0, p.stderr[-2000:]
    b = json.loads(p.stdout)["plans"][0]
    dp = 8 // (b["tensor_parallel"] * b["pipeline_parallel"] * b["sequence_parallel"])
    assert b["pipeline_parallel"] == 2 and b["micro_batch"] * b["gradient_accumulation"] * dp == 12, b
    # no degree given: data parallelism (DP 8) cannot hold 12, but the layouts above can (runtime/config.py
    # _batch_assertion: train_batch_size = micro x GA x DP), so a plan of one of them, and a note naming
    # the multiples of 8 on either side; only --no-model-parallel (DP 8 alone) refuses
    p = run_cli(["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
                 "--global-batch", "12", "--seq-len", "1024", "--format", "json"])
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    for b in out["plans"]:
        dp = 8 // (b["tensor_parallel"] * b["pipeline_parallel"] * b["sequence_parallel"])
        assert dp < 8 and b["micro_batch"] * b["gradient_accumulation"] * dp == 12, b
    assert any("not a multiple of the world 8" in n and "--global-batch 8 or 16" in n for n in out["notes"]), out["notes"]
    p = run_cli(["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
                 "--global-batch", "12", "--seq-len", "1024", "--no-model-parallel"])
    assert _one_line_refusal(p, "data-parallel size 8").endswith("use 8 or 16")


@pytest.mark.parametrize("degrees", [["--tensor-parallel", "1", "--pipeline-parallel", "2"],
                                     ["--sequence-parallel", "2"]])
def test_global_batch_no_fixed_layout_divides_names_its_multiples(degrees):
    # TP 1 x PP 2, or Ulysses 2 (divides 8 GPUs, 12 heads, 1024 tokens), on 8 ranks: one layout, DP 4;
    # 10 is no multiple of 4: the multiples on either side are 8 and 12
    p = run_cli(["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
                 "--global-batch", "10", "--seq-len", "1024", *degrees])
    line = _one_line_refusal(p, "--global-batch 10 is not a multiple of the data-parallel size 4")
    assert line.endswith("use 8 or 12"), line


def test_micro_batch_check_reads_the_fixed_layouts_when_the_world_does_not_divide_the_batch():
    # before, request_problem returned early on 12 % 8 (the global batch's refusal was to come first);
    # PP 2: DP 4, 2, 1 -> 3, 6, 12 sequences per rank; their divisors 1, 2, 3, 4, 6, 12; 5 divides none
    p = run_cli(["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
                 "--global-batch", "12", "--seq-len", "1024", "--pipeline-parallel", "2", "--micro-batch", "5"])
    line = _one_line_refusal(p, "--micro-batch 5", "3, 6, 12 per rank")
    assert line.endswith("use 1, 2, 3, 4, 6 or 12"), line


@pytest.mark.parametrize("flag", [["--tensor-parallel", "2"], ["--pipeline-parallel", "2"]])
def test_hf_layout_refusal_names_hf(flag):
    """Review 2026-12-06: under --hf generate searches data parallelism only (views/generate.py
    model_parallel_layouts and ulysses_degrees return nothing else for req.hf), so a TP or PP flag is refused --
    with the reason: --hf, not the divisibility rules the generic refusal lists (llama-2-13b's 40 heads and 40
    layers divide by 2)."""
    p = run_cli(["generate", "--model", "llama-2-13b", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node",
                 "8", "--global-batch", "32", "--seq-len", "2048", "--hf", *flag])
    line = _one_line_refusal(p, f"{' '.join(flag)}: not a layout generate writes under --hf")
    assert f"drop {flag[0]} or --hf" in line and "divides" not in line, line
