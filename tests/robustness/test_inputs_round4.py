"""Robustness, issue 21 (a newcomer's defects): each one fixed as a mechanism, each with its
regression test here.

1. An optional file looked for by name (the workload sidecar, a ``--model`` folder's config.json,
   an accelerate YAML's ``deepspeed_config_file``) that is a FIFO, a device or a directory is
   refused in one line naming it (``readers.regular_file_at``), never skipped, never blocking.
2. Every echo of a command-line value in an error is cut (``errors.cut``), whichever option or
   argument it came from; a number past Python's 4,300-digit limit gets the project's words.
3. One ``MAX_SEQ_LEN`` for a model's positions and ``--seq-len``.
4. Ctrl-C exits 130 (``errors.EXIT_INTERRUPTED``) with one line, not click's "Aborted!" / 1.
5. An HF config.json's bad value is named by the key the file wrote (``num_hidden_layers``,
   ``n_layer``), not the spec field it fills (``num_layers``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.errors import AdvisorError
from robust_helpers import clean_env, default_sigint, run_cli

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_configs" / "zero3_cpu_offload.json"
GOOD_HF = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 128}


def _one_line(msg: str) -> None:
    assert msg and "\n" not in msg.strip() and "Traceback" not in msg and "internal error" not in msg, msg


def invoke(args: list[str]):
    """In process (no last-resort guard), so an exception the guard would hide is seen."""
    res = CliRunner().invoke(main, args, env={}, catch_exceptions=True)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


def _special(tmp_path: Path, kind: str, name: str) -> Path:
    """``tmp_path/name`` made a FIFO, a symlink to /dev/zero, or a directory."""
    p = tmp_path / name
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "zero":
        p.symlink_to("/dev/zero")
    else:
        p.mkdir()
    return p


WORDS = {"fifo": "FIFO", "zero": "character device", "dir": "directory"}


# --- 1. optional files looked for by name go through the guarded reader -----------------------

@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
@pytest.mark.parametrize("cmd", [["estimate", "{c}", "--params", "1000"], ["check", "{c}", "--params", "1000",
                                                                            "--gpu-memory", "80GB", "--host-memory", "512GB"],
                                 ["checkpoint", "{c}", "--params", "1000"], ["lint", "{c}", "--world-size", "8"],
                                 ["lint", "{c}"]])
def test_a_sidecar_that_is_not_a_regular_file_is_refused_naming_it(tmp_path, kind, cmd):
    cfg = tmp_path / "ds.json"
    cfg.write_text(SAMPLE.read_text())
    side = _special(tmp_path, kind, "ds.workload.json")
    p = run_cli([a.format(c=cfg) for a in cmd], timeout=60)  # a FIFO read would block: the timeout fails it
    assert p.returncode == 2, (p.returncode, p.stderr)
    err = p.stderr.strip().splitlines()[0]
    _one_line(err)
    assert str(side) in err and "workload sidecar" in err and WORDS[kind] in err, err


def test_a_sidecar_that_is_a_regular_file_is_still_read(tmp_path):
    """The guard does not lose a real sidecar (nor invent one where there is none)."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(SAMPLE.read_text())

    def seq_len():
        p = run_cli(["estimate", str(cfg), "--params", "1000", "--format", "json"])
        assert p.returncode in (0, 1), p.stderr
        return json.loads(p.stdout)["assumptions"]["workload"]["seq_len"]
    assert seq_len() is None  # --params: no model context, no sidecar
    (tmp_path / "ds.workload.json").write_text(json.dumps({"seq_len": 96}))
    assert seq_len() == 96


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_model_folder_whose_config_json_is_not_a_regular_file(tmp_path, kind):
    folder = tmp_path / "m"
    folder.mkdir()
    _special(folder, kind, "config.json")
    res = invoke(["estimate", str(SAMPLE), "--model", str(folder)])
    assert res.exit_code == 2
    _one_line(res.output)
    assert f"{folder / 'config.json'}: is a" in res.output and WORDS[kind] in res.output, res.output
    assert "must hold a config.json" not in res.output  # it does hold one; it is not a regular file


def test_model_folder_without_config_json_is_still_called_missing(tmp_path):
    res = invoke(["estimate", str(SAMPLE), "--model", str(tmp_path)])
    assert res.exit_code == 2 and "must hold a config.json" in res.output, res.output


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_deepspeed_config_file_not_a_regular_file_names_the_yaml(tmp_path, kind):
    from advisor.config.hf import deepspeed_config_file_at, read_accelerate_config
    _special(tmp_path, kind, "ds.json")
    y = tmp_path / "acc.yaml"
    y.write_text(f"distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  deepspeed_config_file: "
                 f"{tmp_path / 'ds.json'}\n")
    with pytest.raises(AdvisorError) as e:
        deepspeed_config_file_at(read_accelerate_config(str(y)))
    _one_line(str(e.value))
    assert str(e.value).startswith(f"{y}: deepspeed_config_file {tmp_path / 'ds.json'}: is a") and WORDS[kind] in str(e.value)
    for cmd in (["lint", str(y)], ["resolve", str(y)], ["estimate", str(y), "--params", "1000"]):
        res = invoke(cmd)
        assert res.exit_code == 2 and str(y) in res.output and WORDS[kind] in res.output, res.output


def test_lint_refuses_a_deepspeed_config_file_swapped_for_a_fifo_after_it_was_read(tmp_path, monkeypatch):
    """lint looks the named file up a second time (to lint it as --hf and give it the launch's world
    size): a FIFO found then is the YAML's error line, not a file silently left unlinted."""
    import advisor.config.inputs as inputs
    ds = tmp_path / "ds.json"
    ds.write_text(SAMPLE.read_text())
    y = tmp_path / "acc.yaml"
    y.write_text(f"distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  deepspeed_config_file: {ds}\n")
    real = inputs.read_input

    def read_then_swap(path, **kw):
        out = real(path, **kw)
        if path == str(y):
            ds.unlink()
            os.mkfifo(ds)
        return out
    monkeypatch.setattr(inputs, "read_input", read_then_swap)
    res = invoke(["lint", str(y)])
    assert res.exit_code == 2, res.output
    assert f"{y}: deepspeed_config_file {ds}: is a FIFO" in res.output, res.output


# --- 3. one bound of tokens per sequence --------------------------------------------------------

def test_a_model_and_seq_len_share_one_bound_of_tokens_per_sequence(tmp_path):
    """2^40 (README "Inputs, limits and outputs"): a config.json's positions past the old 2^26 model
    bound are read, past 2^40 refused naming the key; --seq-len likewise at the same figure."""
    from advisor.model.specs import spec_from_hf_config
    assert spec_from_hf_config({**GOOD_HF, "max_position_embeddings": (1 << 26) + 1}).max_seq_len == (1 << 26) + 1
    assert spec_from_hf_config({**GOOD_HF, "max_position_embeddings": 1 << 40}).max_seq_len == 1 << 40
    with pytest.raises(AdvisorError, match=r"is 1,099,511,627,777, over the limit 1,099,511,627,776"):
        spec_from_hf_config({**GOOD_HF, "max_position_embeddings": (1 << 40) + 1}, "cfg.json")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**GOOD_HF, "max_position_embeddings": 1 << 40}))
    ok = invoke(["estimate", str(SAMPLE), "--model", str(cfg), "--seq-len", str(1 << 40), "--world-size", "8",
                 "--format", "json"])
    assert ok.exit_code in (0, 1), ok.output  # read and estimated (it does not fit: 2^40 tokens)
    d = json.loads(ok.stdout)
    assert d["assumptions"]["workload"]["seq_len"] == 1 << 40 and d["ranks"], ok.stdout[:2000]
    bad = invoke(["estimate", str(SAMPLE), "--model", str(cfg), "--seq-len", str((1 << 40) + 1)])
    assert bad.exit_code == 2 and "--seq-len" in bad.output, bad.output


# --- 5. a config.json's bad value named by the key the file wrote -------------------------------

@pytest.mark.parametrize("cfg,key,spec_field", [
    ({**GOOD_HF, "num_hidden_layers": 10 ** 6}, "num_hidden_layers", "num_layers"),
    ({**GOOD_HF, "num_hidden_layers": 0}, "num_hidden_layers", "num_layers"),
    ({**GOOD_HF, "max_position_embeddings": -1}, "max_position_embeddings", "max_seq_len"),
    ({**GOOD_HF, "num_attention_heads": 5}, "num_attention_heads", "num_heads"),
    ({**GOOD_HF, "num_key_value_heads": 3}, "num_key_value_heads", "num_kv_heads"),
    ({"model_type": "gpt2", "n_embd": 64, "n_layer": 10 ** 6, "n_head": 4}, "n_layer", "num_layers"),
    ({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 0}, "n_positions", "max_seq_len"),
    ({"model_type": "mixtral", **{k: v for k, v in GOOD_HF.items() if k != "model_type"}, "num_local_experts": 0},
     "num_local_experts", "num_experts"),
])
def test_hf_config_errors_name_the_key_the_file_wrote(tmp_path, cfg, key, spec_field):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    res = invoke(["estimate", str(SAMPLE), "--model", str(path)])
    assert res.exit_code == 2, res.output
    _one_line(res.output)
    assert key in res.output, res.output
    assert spec_field not in res.output.replace(key, ""), res.output  # the spec's own name is not the user's


# --- 4. Ctrl-C is exit 130 with one line --------------------------------------------------------

def _wait_blocked_on_read(pid: int, timeout: float = 60) -> None:
    """Until the process sleeps in a read of its standard input (started and blocked), or fail."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            syscall = Path(f"/proc/{pid}/syscall").read_text().split()[:2]
        except (OSError, IndexError):
            state, syscall = "?", []
        if state == "S" and syscall[:2] == ["0", "0x0"]:  # read(2) (x86-64 syscall 0) on fd 0
            return
        time.sleep(0.1)
    pytest.fail("the command never blocked reading its standard input")


@pytest.mark.skipif(not Path("/proc/self/syscall").exists(), reason="needs /proc/PID/syscall to see the blocked read")
@pytest.mark.parametrize("cmd", [["lint", "-"], ["report", "-", "--params", "1000", "-o", "out.html"]])
def test_ctrl_c_exits_130_with_one_line_and_leaves_no_file(tmp_path, cmd):
    """SIGINT to a command blocked reading its config from a stdin pipe that never closes:
    exit 130 (errors.EXIT_INTERRUPTED), one line naming the interrupt, not click's "Aborted!"
    (exit 1); no output or temporary file is left in the folder it writes to."""
    p = subprocess.Popen([sys.executable, "-m", "advisor", *cmd], cwd=tmp_path, env=clean_env(),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=default_sigint)
    try:
        _wait_blocked_on_read(p.pid)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = err.decode()
    assert p.returncode == 130, (p.returncode, err)
    _one_line(err)
    assert err.strip() == "ds-advisor: interrupted (Ctrl-C)", err
    assert "Aborted" not in err + out.decode()
    assert list(tmp_path.iterdir()) == []


# --- 2. every echo of a command-line value is cut -----------------------------------------------

LONG = "x" * 120_000
HF_SAMPLE = ROOT / "sample_configs" / "hf_trainer_zero3_auto.json"
#: Arguments that make each command reach its body (where our own messages are built), beside the
#: one under test; a value is never given twice (--model / --params are one choice).
BASE = {
    "lint": [str(SAMPLE)], "estimate": [str(SAMPLE), "--params", "1000"],
    "check": [str(SAMPLE), "--params", "1000", "--gpu-memory", "80GB", "--host-memory", "512GB"],
    "checkpoint": [str(SAMPLE), "--params", "1000"], "report": [str(SAMPLE), "--params", "1000", "-o", "{out}"],
    "resolve": [str(HF_SAMPLE), "--hf"], "measure": [str(SAMPLE), "--params", "1000"],
    "generate": ["--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
                 "--global-batch", "8", "--seq-len", "128"],
    "explain": [], "models": [], "hardware": [],
}
EXCLUSIVE = {"model": ("params",), "params": ("model",)}


def _value_params():
    """(command, parameter) for every option or argument of every command that takes a value."""
    import click
    out = []
    for name in sorted(main.commands):
        for p in main.commands[name].params:
            if isinstance(p, click.Option) and (p.is_flag or p.count or p.name == "help"):
                continue
            out.append(pytest.param(name, p.name, id=f"{name}-{p.opts[0] if isinstance(p, click.Option) else p.name}"))
    return out


def _args(cmd: str, pname: str, value: str, tmp_path: Path) -> tuple[list[str], str | None]:
    """The command line with ``value`` given to ``pname``; the option's spelling (None: an argument)."""
    import click
    param = next(p for p in main.commands[cmd].params if p.name == pname)
    base = [a.format(out=tmp_path / "out.html") for a in BASE[cmd]]
    skip = {o for q in main.commands[cmd].params if q.name in (pname, *EXCLUSIVE.get(pname, ()))
            for o in getattr(q, "opts", [])}
    kept, i = [], 0
    while i < len(base):  # drop the option under test (and its exclusive twin) from the base line
        if base[i] in skip:
            i += 2
            continue
        kept.append(base[i])
        i += 1
    if isinstance(param, click.Argument):
        args = [cmd, value] + kept[1:] if kept and not kept[0].startswith("-") else [cmd, value] + kept
        return args, None
    return [cmd, *kept, param.opts[0], value], param.opts[0]


@pytest.mark.parametrize("cmd,pname", _value_params())
def test_a_long_value_is_never_echoed_whole(tmp_path, cmd, pname):
    """A 120,000-character value, to every option and argument of every command: it never appears
    in the output longer than a path may be echoed (errors.MAX_PATH_ECHO_CHARS; any other value is
    cut at 60); a refusal is one line under 1 KB naming the option (an argument's refusal names
    the file or value, cut)."""
    from advisor.errors import MAX_PATH_ECHO_CHARS
    args, opt = _args(cmd, pname, LONG, tmp_path)
    res = CliRunner().invoke(main, args, env={}, catch_exceptions=True)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    out = res.stdout + res.stderr
    assert LONG[:MAX_PATH_ECHO_CHARS + 1] not in out, (args[:2], opt, out[:300], len(out))
    if res.exit_code == 2:
        msg = res.stderr.strip()
        _one_line(msg)
        assert len(msg.encode()) < 1024, msg[:300]
        if opt is not None:
            assert opt in msg, msg


@pytest.mark.parametrize("args", [["estimate", str(SAMPLE), "--params", "1" * 5000],
                                  ["checkpoint", str(SAMPLE), "--params", "1000", "--keep", "1" * 5000],
                                  ["checkpoint", str(SAMPLE), "--params", "1000", "--checkpointing", "1" * 5000],
                                  ["lint", str(SAMPLE), "--max-steps", "1" * 5000],
                                  ["estimate", str(SAMPLE), "--params", "1000", "--set", "train_batch_size=" + "1" * 5000]])
def test_a_number_past_pythons_digit_limit_gets_the_projects_words(args):
    """Python's int() refuses more than 4,300 digits with "Exceeds the limit (4300 digits) ... use
    sys.set_int_max_str_digits()" (advice for programmers); click called such a count "not a valid
    integer"; --checkpointing said it was not a number of layers. Each is now one line saying how
    many digits the number has."""
    res = invoke(args)
    assert res.exit_code == 2, res.output
    _one_line(res.output)
    assert "a whole number of 5,000 digits" in res.output, res.output
    assert "Exceeds" not in res.output and "set_int_max_str_digits" not in res.output
    assert "not a valid integer" not in res.output and len(res.output) < 1024


@pytest.mark.parametrize("name,text", [("config.json", '{"train_batch_size": %s}'), ("c.hjson", "{train_batch_size: %s}")])
def test_a_config_number_past_pythons_digit_limit_is_located(tmp_path, name, text):
    cfg = tmp_path / name
    cfg.write_text(text % ("1" * 5000))
    res = invoke(["lint", str(cfg)])
    assert res.exit_code == 2
    assert f"{cfg}:1:" in res.stderr and "a whole number of 5,000 digits" in res.stderr, res.stderr
    assert "Exceeds" not in res.output


@pytest.mark.parametrize("field", ["checkpointing", "attention", "seq_len"])
def test_a_long_sidecar_value_is_cut_in_its_refusal(tmp_path, field):
    cfg = tmp_path / "ds.json"
    cfg.write_text(SAMPLE.read_text())
    (tmp_path / "ds.workload.json").write_text(json.dumps({field: LONG}))
    res = invoke(["estimate", str(cfg), "--params", "1000"])
    assert res.exit_code == 2, res.output
    _one_line(res.stderr)
    assert f"/{field}" in res.stderr and "ds.workload.json" in res.stderr and len(res.stderr) < 1024, res.stderr[:300]
