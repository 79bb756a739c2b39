"""The text report's activation line, M100's activation words and the timeline's save_16bit_model label
against the JSON of the same run (newcomer findings 4-6, session 19): each printed part is read back
from the text and must add up to the printed total, which must be the JSON's row; the in-flight
count is computed here from DeepSpeed's 1F1B rule (runtime/pipe/schedule.py TrainSchedule.num_pipe_buffers,
l.247-256: min(stages - stage_id, micro_batches) forwards before the first backward)."""

from __future__ import annotations

import json
import re

from tests.conftest import SAMPLES, run_cli

GIB = 2 ** 30
WIDE = {"COLUMNS": "200"}  # fewer folds; folded lines are joined back

#: Newcomer finding 4: llama-3-70b, 2 pipeline stages x TP 4 x DP 4, micro-batch 4 (zero2.json), global 32.
PP_ARGS = [str(SAMPLES / "zero2.json"), "--model", "llama-3-70b", "--world-size", "32", "--tensor-parallel", "4",
           "--pipeline-parallel", "2", "--seq-len", "4096", "--set", "zero_optimization.stage=1",
           "--set", "train_batch_size=32"]
#: Newcomer finding 5: the README's first command.
README_ARGS = [str(SAMPLES / "zero3_cpu_offload.json"), "--model", "llama-3-8b", "--world-size", "8",
               "--gpu-memory", "80GB"]


def _estimate(args: list[str]) -> tuple[str, dict]:
    text = run_cli(["estimate", *args], env=WIDE)
    js = run_cli(["estimate", *args, "--format", "json"], env=WIDE)
    assert js.returncode in (0, 1), js.stderr
    return text.stdout, json.loads(js.stdout)


def _unparen(s: str) -> str:
    """``s`` without its parenthesised asides (nested ones too): the numbers outside them are the sum's."""
    out, depth = [], 0
    for ch in s:
        depth += ch == "("
        if not depth:
            out.append(ch)
        depth -= ch == ")" and depth > 0
    return "".join(out)


def _gib(s: str) -> float:
    return float(s.replace(",", ""))


def _activation_lines(text: str) -> list[str]:
    """Each "  activations: " line with its folded continuation lines (a deeper indent) joined back."""
    out: list[str] = []
    lines = text.splitlines()
    for i, x in enumerate(lines):
        if x.startswith("  activations: "):
            parts = [x.strip()]
            for y in lines[i + 1:]:
                if not y.startswith("      "):
                    break
                parts.append(y.strip())
            out.append(" ".join(parts))
    return out


def _state_rows(text: str) -> list[float]:
    """The state tables' accelerator activations cell, one per role in print order."""
    return [_gib(x.split("│")[2]) for x in text.splitlines() if x.startswith("│ activations ")]


def _check_line_adds_up(line: str, ac: dict, row_bytes: int) -> None:
    """No-recompute line: "... = KEPT GiB kept for backward + part GiB ... = TOTAL GiB, the activations row":
    KEPT + parts == TOTAL (to the printed rounding), TOTAL is the JSON row, KEPT the saved bytes less the loss head."""
    segs = _unparen(line).split(" = ")
    assert len(segs) == 3 and segs[2].endswith("GiB, the activations row"), line
    kept = _gib(re.match(r"([\d,.]+) GiB kept for backward", segs[1]).group(1))
    parts = [_gib(x) for x in re.findall(r"\+ [^+=]*?([\d,.]+) GiB", segs[1])]
    total = _gib(segs[2].split()[0])
    assert abs(kept + sum(parts) - total) <= 0.005 * (len(parts) + 1) + 1e-9, line
    assert round(row_bytes / GIB, 2) == total, (line, row_bytes)
    assert round((ac["saved_accelerator"] - ac["loss_head"]) / GIB, 2) == kept, line
    # every term the row holds is named: the loss head, the largest transient, the ledger's own entries
    want = [ac["loss_head"], max(ac["loss_spike"], ac["loss_backward_spike"], ac["recompute_layer"])]
    want += [x["bytes"] for x in ac["row_items"]]
    assert sorted(parts) == sorted(round(b / GIB, 2) for b in want if b), (line, want)


def test_pipeline_activation_line_names_the_micro_batches_in_flight():
    text, d = _estimate(PP_ARGS)
    pp, dp = d["cluster"]["pipeline_parallel"], d["cluster"]["dp_world_size"]
    ga = 32 // (4 * dp)  # train_batch_size / (micro-batch x data-parallel ranks)
    lines, rows = _activation_lines(text), _state_rows(text)
    assert len(lines) == len(rows) == 2  # one role per stage shown
    shown = sorted({r["stages"][0]: r for r in d["ranks"]}.items())
    for (stage, r), line, row in zip(shown, lines, rows):
        ac = r["activations"]
        flight = min(pp - stage, ga)  # DeepSpeed's 1F1B in-flight forwards on this stage
        assert ac["in_flight"] == flight
        # llama's layers are alike: the layers' saved bytes are (layers x one layer + what the PipelineEngine keeps
        # of each micro-batch: stage 0's output, 16-bit s x b x h, and its input ids' clone, int64 s x b;
        # engine.py l.751, l.705) x in flight, exactly
        assert ac["pipe_kept"] == ((2 * 4096 * 4 * 8192 + 8 * 4096 * 4) if stage == 0 else 0)
        assert (ac["layers_on_rank"] * ac["per_layer"] + ac["pipe_kept"]) * flight == \
            ac["saved_accelerator"] - ac["loss_head"]
        m = re.search(r"(\d+) layers x ([\d.]+) GiB each(?: \+ [\d.,]+ [KMG]iB the PipelineEngine keeps[^)]*\))? x "
                      r"(\d+) micro-batch(?:es)? in flight \(1F1B: "
                      r"min\(stages - stage, micro-batches\), runtime/pipe/schedule\.py", line)
        assert m and int(m.group(1)) == ac["layers_on_rank"] and int(m.group(3)) == flight, line
        tiers = r["tiers"]["accelerator"]["activations"]
        _check_line_adds_up(line, ac, tiers)
        assert round(tiers / GIB, 2) == row  # the printed total is the table's row


def test_m100_names_the_peak_stage_activations():
    """M100's "saved for backward" is the peak rank's (stage 0: 2 micro-batches in flight, no loss head),
    the figure at the timeline's peak, not a stage-less mix of stage 0's in-flight and stage 1's head."""
    _, d = _estimate(PP_ARGS + ["--gpu-memory", "80GB"])
    m100 = next(f for f in d["findings"] if f["code"] == "M100" and f["data"].get("tier") == "accelerator")
    worst = max(d["ranks"], key=lambda r: r["peak"]["accelerator"]["bytes"])
    at_peak = next(c["bytes"] for c in worst["peak"]["accelerator"]["top"] if c["item"] == "activations")
    assert worst["activations"]["saved_accelerator"] == at_peak
    assert f"({at_peak / GIB:.2f} GiB saved for backward, {worst['activations']['in_flight']} micro-batches " \
           "in flight)" in m100["fix"], m100["fix"]


def test_readme_activation_line_names_every_term_of_the_row():
    text, d = _estimate(README_ARGS)
    (line,), (row,) = _activation_lines(text), _state_rows(text)
    r = d["ranks"][0]
    ac = r["activations"]
    assert ac["in_flight"] == 1 and "in flight" not in line  # no pipeline: nothing to name
    assert ac["loss_backward_spike"] > ac["loss_spike"]  # the transient the old line left out
    _check_line_adds_up(line, ac, r["tiers"]["accelerator"]["activations"])
    assert round(r["tiers"]["accelerator"]["activations"] / GIB, 2) == row
    # the smaller transient is named, with its size, as left out and why (forward's, freed before the loss backward)
    assert (f"(the largest transient; the forward's fp32 logits copy, {ac['loss_spike'] / GIB:.2f} GiB, is freed "
            "before this and is not added)") in line, line


def _save16(args: list[str]) -> tuple[str, dict]:
    d = json.loads(run_cli(["estimate", *args, "--format", "json"], env=WIDE).stdout)
    label = next(x["label"] for x in d["ranks"][0]["timeline"] if x["instant"] == "save:16bit")
    return label, d["checkpoint"]["save_16bit_model"]


def test_save_16bit_label_agrees_with_the_checkpoint_section():
    """ZeRO-3 without stage3_gather_16bit_weights_on_model_save: DeepSpeed's save_16bit_model returns False
    before writing (runtime/engine.py l.5730-5740; run on the engine in tests/engine/test_save_parity.py's
    z3_bf16_save_w2): the timeline says so with the checkpoint section's own reason."""
    base = [str(SAMPLES / "zero3_cpu_offload.json"), "--params", "100000000", "--world-size", "8"]
    label, s16 = _save16(base)
    assert s16["writes"] is False and "writes nothing" in label and "writes the module state dict" not in label
    reason = s16["note"].split(";")[0]
    assert "stage3_gather_16bit_weights_on_model_save" in reason and reason in label
    label, s16 = _save16(base + ["--set", "zero_optimization.stage3_gather_16bit_weights_on_model_save=true"])
    assert s16["writes"] is True and s16["gather_accelerator_bytes"] > 0 and "gathered" in label
    label, s16 = _save16([str(SAMPLES / "zero2.json"), "--params", "100000000", "--world-size", "8"])
    assert s16["writes"] is True and label == "save_16bit_model: rank 0 writes the module state dict"


def test_tight_verdict_says_what_its_figure_is():
    """The README command is TIGHT: its headroom is less than how far the runtime overhead terms may
    exceed their estimates (each term's band top less its figure, summed here from the JSON), and the
    verdict says that figure is the runtime-overhead band, not a bare "within X"."""
    text, d = _estimate(README_ARGS)
    acc = next(f for f in d["fit"] if f["tier"] == "accelerator")
    band = sum(t["high"] - t["bytes"] for t in acc["overhead"])
    assert acc["verdict"] == "tight" and 0 <= acc["headroom"] < band
    flat = " ".join(text.split())
    verdict = flat[flat.index("TIGHT ("):]
    assert verdict.startswith(f"TIGHT (the headroom is inside the runtime-overhead band: up to {band / GIB:.2f} GiB "
                              "more if "), verdict[:200]
    named = [t["name"] for t in acc["overhead"] if t["high"] > t["bytes"]]
    assert all(n in verdict[:verdict.index("reach their band's top")] for n in named), verdict[:300]


def test_generate_to_stdout_says_no_sidecar_was_written(tmp_path):
    """generate -o - (and without -o) prints the config on stdout and writes no workload sidecar: one
    stderr line says so and names the flags that carry the plan's workload; stdout stays the config."""
    args = ["generate", "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
            "--global-batch", "64", "--seq-len", "2048"]
    p = run_cli(args + ["-o", "-"], cwd=tmp_path, env={"COLUMNS": "400"})
    assert p.returncode == 0, p.stderr[-1000:]
    json.loads(p.stdout)  # the config alone
    assert not list(tmp_path.iterdir())  # nothing written
    line = next(x for x in p.stderr.splitlines() if "no workload sidecar was written" in x)
    assert "--seq-len 2048" in line
    q = run_cli(args + ["-o", str(tmp_path / "c.json")], cwd=tmp_path, env={"COLUMNS": "400"})
    assert q.returncode == 0 and (tmp_path / "c.workload.json").exists()
    assert "no workload sidecar" not in q.stdout + q.stderr
    # --hf: the sidecar would carry the Trainer arguments too; the line names them as check / estimate --hf's flags
    side = json.loads((tmp_path / "c.json").with_name("c.workload.json").read_text())
    h = run_cli(args + ["--hf"], cwd=tmp_path, env={"COLUMNS": "400"})
    line = next(x for x in h.stderr.splitlines() if "no workload sidecar was written" in x)
    hq = run_cli(args + ["--hf", "-o", str(tmp_path / "h.json")], cwd=tmp_path, env={"COLUMNS": "400"})
    tr = json.loads((tmp_path / "h.workload.json").read_text())["trainer"]
    assert hq.returncode == 0 and "trainer" not in side
    assert f"--per-device-train-batch-size {tr['per_device_train_batch_size']} " \
           f"--gradient-accumulation-steps {tr['gradient_accumulation_steps']}" in line and "--bf16" in line, line
