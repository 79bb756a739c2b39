"""Fuzzing every reader beside the DeepSpeed config (issue 21, fuzz round c), bounded and seeded.

test_fuzz_cli.py mutates DeepSpeed configs. This file mutates every other input a command reads,
with the mutation kinds that found defects there: non-finite numbers (``NaN``, ``Infinity``,
``1e999``; YAML ``.nan`` / ``.inf``; TOML ``nan`` / ``inf``), ``-0`` and ``1e308``, huge counts
(20, 300 and 5,000 digits), wrong types, lone surrogates and terminal escapes in keys and values,
deep nesting, BOMs, duplicate keys, empty files, and FIFOs, ``/dev/zero``, directories and
symlinks to them in place of each file. Readers: accelerate YAML (and its
``deepspeed_config_file``), an HF config.json folder, a model spec, an inventory, a hardware spec,
the workload sidecar, ``.ds-advisor.toml`` / ``pyproject.toml``, the launcher's environment
(WORLD_SIZE, SLURM_*, LOCAL_WORLD_SIZE, *_VISIBLE_DEVICES, COLUMNS) and the probes' output
(a fake ``nvidia-smi`` / ``rocm-smi`` on PATH).

The contract (README, advisor/errors.py): a documented exit code, never an exception other than
the one-line AdvisorError the console guard prints, never "Traceback" or "internal error", no
output line over 1 KiB (every echo of input is cut), no file written, at most 1 MB of output.

Deterministic: ``random.Random(seed)`` per case, :data:`CASES` cases per reader (about 300 in
all, in-process through click's CliRunner; the whole file runs in well under 30 s).
"""

from __future__ import annotations

import copy
import json
import os
import random
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.errors import AdvisorError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_configs" / "zero3_cpu_offload.json"
#: Cases per reader (seeded: the same inputs every run).
CASES = 40
DOCUMENTED = {0, 1, 2, 3, 4}

SPEC = {"name": "tiny", "family": "llama", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 4,
        "intermediate_size": 128, "vocab_size": 1000, "max_seq_len": 128, "num_experts": 0}
HF = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
      "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 128,
      "torch_dtype": "bfloat16", "tie_word_embeddings": False}
ACC = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "mixed_precision": "bf16",
       "deepspeed_config": {"zero_stage": 2, "offload_optimizer_device": "cpu", "offload_param_device": "none",
                            "gradient_accumulation_steps": 4, "zero3_init_flag": False},
       "machine_rank": 0, "num_machines": 1, "num_processes": 8, "use_cpu": False}
HW = {"base": "dgx-h100", "nodes": 2, "accelerators_per_node": 8, "host_memory_bytes": 2 * 10 ** 12,
      "storage": [{"name": "raid", "mounts": ["/raid"], "capacity_bytes": 3 * 10 ** 13, "read_bytes_per_s": 5.6e10,
                   "write_bytes_per_s": 3.0e10, "endurance": {"dwpd": 1, "warranty_years": 5}, "access": "read-write"}]}
SIDE = {"written_by": "ds-advisor generate", "seq_len": 64, "micro_batch": 1, "checkpointing": "full",
        "attention": "flash", "tensor_parallel": 1, "pipeline_parallel": 1, "sequence_parallel": 1,
        "expert_parallel": 1, "megatron_sp": False,
        "trainer": {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "bf16": True}}
SETTINGS = {"select": ["B001"], "ignore": ["S001"], "world-size": 8, "fail-on": "warning"}

# --- the mutation kinds ---------------------------------------------------------------------------

MARK = "__FUZZ__"
#: Literal text put where a value was (JSON / YAML / TOML spellings of the same kinds).
LITERALS = {
    "json": ["NaN", "Infinity", "-Infinity", "1e999", "-0", "-0.0", "1e308", "5e-324", "1" * 20, "9" * 300, "9" * 5000,
             '"\\ud800"', '"\\u001b[31m"', "[" * 70 + "]" * 70, '"8"', "[]", "{}", "null", "true"],
    "yaml": [".nan", ".inf", "-.inf", "-0", "1e308", "1" * 20, "9" * 300, "9" * 5000, "'\\ud800'", "[]", "{}", "~", "true",
             "2021-01-01", "0x10", "1_000", "!!binary AAAA", "[" * 70 + "]" * 70],
    "toml": ["nan", "inf", "-inf", "-0", "1e308", "1" * 20, "9" * 300, "9" * 5000, '"\\ud800"', "[]", "{}", "true",
             '"' + "x" * 500 + '"', "1979-05-27"],
}
KEYS = ["\ud800", "k\udc00", "\x1b[31m", "x" * 300]
ENV_VALUES = ["nan", "inf", "-0", "0", "-1", "1e308", "9" * 25, "9" * 5000, "", " 8 ", "0x8", "8.0", "\u0663", "\u00b2",
              "4(x2)", "gpu:4", "0,0,0", ",,,", "1" * 5000, "1," * 3000, "GPU-\x1b[2J", "65537", "2147483648"]
SPECIALS = ["fifo", "zero", "dir", "dirlink", "loop", "empty", "bom"]


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append(prefix + (k,))
        out += _paths(v, prefix + (k,))
    return out


def _at(obj: Any, path: tuple) -> tuple[Any, Any]:
    for k in path[:-1]:
        obj = obj[k]
    return obj, path[-1]


def mutate(base: dict, rng: random.Random, syntax: str) -> str:
    """``base`` with one value replaced by a literal of :data:`LITERALS`, or a key by one of
    :data:`KEYS`, or a duplicate key, written in ``syntax`` (JSON; YAML accepts it too)."""
    d = copy.deepcopy(base)
    path = rng.choice(_paths(d))
    parent, last = _at(d, path)
    kind = rng.choice(["value", "value", "value", "key", "dup"])
    if kind == "key" and isinstance(parent, dict):
        parent[rng.choice(KEYS)] = parent.pop(last)
        return json.dumps(d, ensure_ascii=False)
    parent[last] = MARK
    text = json.dumps(d, ensure_ascii=False)
    if kind == "dup":
        return text.replace("{", '{"%s": 1, ' % next(iter(base)), 1).replace(f'"{MARK}"', "1")
    return text.replace(f'"{MARK}"', rng.choice(LITERALS["yaml" if syntax == "yaml" else "json"]))


def toml_text(d: dict, rng: random.Random) -> str:
    lines = [f"{k} = {json.dumps(v)}" for k, v in d.items()]
    i = rng.randrange(len(lines))
    key = lines[i].split(" = ")[0] if rng.random() < 0.8 else json.dumps(rng.choice(KEYS), ensure_ascii=True)
    lines[i] = f"{key} = {rng.choice(LITERALS['toml'])}"
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> None:
    path.write_bytes(text.encode("utf-8", "surrogatepass"))


def special(path: Path, kind: str, text: str = "{}") -> None:
    """``path`` made a FIFO, /dev/zero, a directory, a symlink to one, a symlink loop, an empty
    file or ``text`` behind a UTF-8 BOM."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "dir":
        path.mkdir()
    elif kind == "dirlink":
        path.symlink_to(path.parent)
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())


# --- one case per reader --------------------------------------------------------------------------

def _cfg(tmp: Path) -> Path:
    cfg = tmp / "ds.json"
    cfg.write_text(SAMPLE.read_text())
    return cfg


def case_accelerate(tmp: Path, rng: random.Random) -> tuple[list[str], dict]:
    y = tmp / "acc.yaml"
    if rng.random() < 0.2:
        inner = tmp / "inner.json"
        special(inner, rng.choice(SPECIALS), SAMPLE.read_text()) if rng.random() < 0.5 else \
            write(inner, mutate(json.loads(SAMPLE.read_text()), rng, "json"))
        write(y, json.dumps({**ACC, "deepspeed_config": {"deepspeed_config_file": str(inner)}}))
    else:
        write(y, mutate(ACC, rng, "yaml"))
    cmd = rng.choice([["resolve", str(y)], ["lint", str(y)], ["estimate", str(y), "--params", "1000"]])
    return cmd, {}


def case_hf_folder(tmp: Path, rng: random.Random) -> tuple[list[str], dict]:
    (tmp / "m").mkdir()
    if rng.random() < 0.15:
        special(tmp / "m" / "config.json", rng.choice(SPECIALS), json.dumps(HF))
    else:
        write(tmp / "m" / "config.json", mutate(HF, rng, "json"))
    return rng.choice([["estimate", str(_cfg(tmp)), "--model", str(tmp / "m"), "--world-size", "8"],
                       ["lint", str(_cfg(tmp)), "--model", str(tmp / "m"), "--world-size", "8"]]), {}


def case_model_spec(tmp: Path, rng: random.Random) -> tuple[list[str], dict]:
    write(tmp / "spec.json", mutate(SPEC, rng, "json"))
    return ["estimate", str(_cfg(tmp)), "--model", str(tmp / "spec.json"), "--world-size", "8"], {}


def case_inventory(tmp: Path, rng: random.Random) -> tuple[list[str], dict]:
    from advisor.model.specs import ModelSpec, expand
    inv = expand(ModelSpec.from_dict(SPEC)).to_dict()
    inv["tensors"] = inv["tensors"][:4]
    write(tmp / "inv.json", mutate(inv, rng, "json"))
    return [rng.choice(["estimate", "checkpoint"]), str(_cfg(tmp)), "--model", str(tmp / "inv.json"),
            "--world-size", "8"], {}


def case_hardware(tmp: Path, rng: random.Random) -> tuple[list[str], dict]:
    hw = tmp / "hw.json"
    special(hw, rng.choice(SPECIALS), json.dumps(HW)) if rng.random() < 0.15 else write(hw, mutate(HW, rng, "json"))
    return rng.choice([["estimate", str(_cfg(tmp)), "--params", "1000", "--hardware", str(hw)],
                       ["checkpoint", str(_cfg(tmp)), "--params", "1000", "--hardware", str(hw)],
                       ["hardware", str(hw)]]), {}


def case_sidecar(tmp: Path, rng: random.Random) -> tuple[list[str], dict]:
    cfg = _cfg(tmp)
    side = tmp / "ds.workload.json"
    special(side, rng.choice(SPECIALS), json.dumps(SIDE)) if rng.random() < 0.2 else write(side, mutate(SIDE, rng, "json"))
    return rng.choice([["estimate", str(cfg), "--params", "1000"], ["lint", str(cfg), "--world-size", "8"],
                       ["checkpoint", str(cfg), "--params", "1000"]]), {}


def case_settings(tmp: Path, rng: random.Random) -> tuple[list[str], dict]:
    cfg = _cfg(tmp)
    name = rng.choice([".ds-advisor.toml", "pyproject.toml"])
    body = toml_text(SETTINGS, rng)
    if name == "pyproject.toml":
        body = "[tool.ds-advisor]\n" + body
    special(tmp / name, rng.choice(SPECIALS), body) if rng.random() < 0.15 else write(tmp / name, body)
    return ["lint", str(cfg)], {}


def case_environment(tmp: Path, rng: random.Random) -> tuple[list[str], dict]:
    names = ["WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NTASKS", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
             "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE", "SLURM_NODEID", "RANK", "GROUP_RANK", "OMP_NUM_THREADS",
             "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "COLUMNS"]
    env = {n: rng.choice(ENV_VALUES) for n in rng.sample(names, rng.randint(1, 3))}
    cfg = str(_cfg(tmp))
    return rng.choice([["check", cfg, "--params", "1000", "--gpu-memory", "80GB", "--host-memory", "512GB"],
                       ["estimate", cfg, "--params", "1000"], ["lint", cfg], ["checkpoint", cfg, "--params", "1000"]]), env


def case_probe(tmp: Path, rng: random.Random) -> tuple[list[str], dict]:
    """A fake accelerator tool on PATH printing mutated output (exit 0 or failing)."""
    bindir = tmp / "bin"
    bindir.mkdir()
    if rng.random() < 0.5:
        tool = "nvidia-smi"
        out = rng.choice(["0, H100, nan, 0", "0, H100, inf, 0", "0, H100, -0, -0", "0, H100, 1e308, 0",
                          "0, H100, " + "9" * 5000 + ", 0", "0, H100, 80000", "0, \x1b[31m, 80000, 0", "", "\x00\xff",
                          "0, H100, 81559, 1\n" * 3000, "0, H100, [N/A], [N/A]", "0, H100, 80000, 90000"])
    else:
        tool = "rocm-smi"
        out = rng.choice(['{"card0": {"VRAM Total Memory (B)": "nan", "VRAM Total Used Memory (B)": "0"}}', "NaN",
                          '{"card0": {"VRAM Total Memory (B)": "1e308"}}', "[1]", '{"card0": []}', "{" * 5000,
                          '{"card0": {"VRAM Total Memory (B)": "%s"}}' % ("9" * 5000), '{"a": 1, "a": 2}'])
    script = bindir / tool
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{out}\nEOF\nexit {rng.choice([0, 0, 1])}\n")
    script.chmod(0o755)
    args = ["check", str(_cfg(tmp)), "--params", "1000"] + rng.choice([[], ["--strict"], ["--format", "json"]])
    return args, {"PATH": f"{bindir}:/usr/bin:/bin"}


READERS: dict[str, Callable[[Path, random.Random], tuple[list[str], dict]]] = {
    "accelerate-yaml": case_accelerate, "hf-config-folder": case_hf_folder, "model-spec": case_model_spec,
    "inventory": case_inventory, "hardware-spec": case_hardware, "workload-sidecar": case_sidecar,
    "settings-toml": case_settings, "environment": case_environment, "probe-output": case_probe,
}


def _listing(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*") if not p.is_symlink() or p.exists()} \
        if d.exists() else set()


def _run(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """One in-process run (no last-resort guard, so an exception it would hide is seen). An
    escaping AdvisorError is what the guard prints as one line, exit 2: checked as such."""
    clean = {k: None for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NTASKS", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
                               "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE", "CUDA_VISIBLE_DEVICES",
                               "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "OMP_NUM_THREADS", "RANK", "LOCAL_RANK")}
    res = CliRunner().invoke(main, args, env={**clean, "COLUMNS": "100", "PATH": "/nonexistent", **env},
                             catch_exceptions=True)
    if isinstance(res.exception, AdvisorError):
        msg = str(res.exception)
        assert "\n" not in msg.strip(), msg
        return res.exception.exit_code, msg
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.output


@pytest.mark.parametrize("reader", sorted(READERS))
def test_fuzz_reader(tmp_path, reader):
    failures = []
    for i in range(CASES):
        rng = random.Random(f"{reader}:{i}")
        d = tmp_path / f"c{i}"
        d.mkdir()
        args, env = READERS[reader](d, rng)
        before = _listing(d)
        try:
            code, out = _run(args, env)
        except Exception as e:  # noqa: BLE001 - collected, reported together below
            failures.append((i, args[:1], env, f"{type(e).__name__}: {e}"[:300]))
            continue
        problems = []
        if code not in DOCUMENTED:
            problems.append(f"exit {code}")
        if "Traceback" in out or "internal error" in out:
            problems.append("traceback / internal error")
        if len(out) > 1_000_000:
            problems.append(f"{len(out)} characters of output")
        long = [line for line in out.splitlines() if len(line.encode("utf-8", "replace")) > 1024]
        if long:
            problems.append(f"a line of {len(long[0])} characters: {long[0][:100]!r}")
        if code == 2 and not out.strip():
            problems.append("exit 2 without a message")
        written = _listing(d) - before
        if written:
            problems.append(f"wrote {sorted(written)[:3]}")
        if problems:
            failures.append((i, args[:1], env, problems, out[-300:]))
    assert not failures, "\n".join(map(repr, failures))
