"""Views: render lint results and estimates as text or JSON.

Text tables use rich (imported only when a table is printed); colour only on a terminal and
never when NO_COLOR is set. JSON shapes are stable and versioned (``schema_version``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import IO, Any

from advisor.findings import Finding

LINT_SCHEMA_VERSION = 1


@dataclass
class FileResult:
    """Lint outcome for one input: findings, or an error line when it could not be read."""

    file: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None


def lint_json(results: list[FileResult]) -> str:
    counts = {"error": 0, "warning": 0, "info": 0}
    for r in results:
        for f in r.findings:
            counts[f.severity] += 1
    return json.dumps({
        "schema_version": LINT_SCHEMA_VERSION,
        "files": [{"file": r.file, "findings": [f.to_dict() for f in r.findings],
                   **({"error": r.error} if r.error else {})} for r in results],
        "summary": {"files": len(results), "unreadable": sum(1 for r in results if r.error), **counts},
    }, indent=2)


_UNSAFE = {c: f"\\x{c:02x}" for c in list(range(0, 32)) + [127] if c not in (9, 10)}


def safe_text(text: str) -> str:
    """Text that is safe to print on any terminal: control characters (ANSI escape sequences
    a config key could carry) shown escaped, and lone surrogates (which hjson, like DeepSpeed,
    accepts in keys) as \\udXXXX instead of failing to encode."""
    return text.translate(_UNSAFE).encode("utf-8", "backslashreplace").decode("utf-8")


def _use_color(stream: IO[str]) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


_SEV_COLOR = {"error": "\033[31m", "warning": "\033[33m", "info": "\033[36m"}


def lint_text(results: list[FileResult], stream: IO[str] | None = None) -> str:
    """One line per finding, ``file:line:col: severity CODE message``, then an indented fix."""
    stream = stream or sys.stdout
    color = _use_color(stream)
    lines: list[str] = []
    n = {"error": 0, "warning": 0, "info": 0}
    for r in results:
        if r.error:
            lines.append(safe_text(r.error))
            continue
        for f in r.findings:
            n[f.severity] += 1
            loc = f.file or r.file
            if f.line is not None:
                loc += f":{f.line}:{f.column or 1}"
            sev = f.severity
            if color:
                sev = f"{_SEV_COLOR[sev]}{sev}\033[0m"
            lines.append(safe_text(f"{loc}: ") + sev + safe_text(f" {f.code} {f.pointer or '/'}: {f.message}"))
            if f.fix:
                lines.append(safe_text(f"    fix: {f.fix}"))
    unreadable = sum(1 for r in results if r.error)
    lines.append(f"{len(results)} file(s): {n['error']} error(s), {n['warning']} warning(s), {n['info']} info"
                 + (f", {unreadable} unreadable" if unreadable else ""))
    return "\n".join(lines)


_CLASS_LABEL = {
    "parameters": "16-bit parameters",
    "gradients": "gradients",
    "master_weights": "fp32 master weights",
    "optimizer_states": "optimizer moments",
    "activations": "activations",
    "workspace": "workspace/buffers",
}


def _fmt(n: int) -> str:
    return "-" if n == 0 else f"{n / 2**30:,.2f}"


def estimate_text(result: Any, explain: bool = False, stream: IO[str] | None = None) -> str:
    """Per-role tables (rows = state classes, columns = tiers, GiB) then fit, assumptions, findings."""
    from rich.console import Console
    from rich.table import Table

    stream = stream or sys.stdout
    console = Console(file=stream, no_color=not _use_color(stream), force_terminal=False,
                      width=(shutil.get_terminal_size((120, 40)).columns if stream.isatty() else 180),
                      highlight=False, soft_wrap=True)
    d = result.to_dict()
    with console.capture() as captured:
        m = d["model"]
        cl = d["cluster"]
        console.print(f"[bold]{d['config']}[/bold]: {m['name']} ({m['parameters']:,} parameters, "
                      f"{m['trainable_parameters']:,} trainable), world size {cl['world_size']} "
                      f"(data-parallel {cl['dp_world_size']}); DeepSpeed {d['deepspeed']} accounting")
        shown = d["ranks"]
        if len(shown) > 2:
            # Ranks of ZeRO-1/2 differ by the gradients of tensors straddling their slices: show
            # the rank with the largest accelerator peak and say how far the others are from it.
            worst = max(shown, key=lambda r: r["peak"]["accelerator"]["bytes"])
            spread = max(abs(r["tiers"][t]["total"] - worst["tiers"][t]["total"]) for r in shown
                         for t in ("accelerator", "host", "nvme"))
            n_other = sum(len(r["ranks"]) for r in shown if r is not worst)
            shown = [worst]
        for role in shown:
            ranks = role["ranks"]
            title = (f"rank {ranks[0]}" if len(ranks) == 1 else
                     f"ranks {ranks[0]}-{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) else
                     f"ranks {', '.join(map(str, ranks))}")
            t = Table(title=f"Per-rank training state, {title} (GiB = 2^30 bytes)", title_justify="left")
            t.add_column("state class")
            for tier in ("accelerator", "host", "nvme"):
                t.add_column(tier + (" (pinned+pageable)" if tier == "host" else ""), justify="right")
            for cls, label in _CLASS_LABEL.items():
                vals = [role["tiers"][tier][cls] for tier in ("accelerator", "host", "nvme")]
                if cls == "activations" and role.get("activations") is None:
                    t.add_row(label, "not estimated", "", "")
                    continue
                t.add_row(label, *map(_fmt, vals))
            t.add_row("[bold]total[/bold]", *(f"[bold]{_fmt(role['tiers'][x]['total'])}[/bold]"
                                               for x in ("accelerator", "host", "nvme")))
            console.print(t)
            a_w = d["assumptions"]["workload"]
            pk = role["peak"]
            console.print("  peak live at once: " + "; ".join(
                f"{tier} {_fmt(pk[tier]['bytes'])} GiB ({pk[tier]['phase']})" for tier in ("accelerator", "host", "nvme")
                if pk[tier]["bytes"]))
            if role.get("activations"):
                ac = role["activations"]
                ck_full = a_w["checkpointing"] == "full"
                console.print(f"  activations: one layer saves {_fmt(ac['per_layer'])} GiB x {ac['layers_on_rank']} layers"
                              + (" (full checkpointing keeps only each layer's input and recomputes one layer at a "
                                 "time in backward)" if ck_full else " (no checkpointing: every layer's tensors kept)")
                              + f"; loss head {_fmt(ac['loss_head'])} GiB + fp32 logits spike "
                              f"{_fmt(ac['loss_spike'])} GiB"
                              + (f"; recomputation adds {ac['recompute_flops_fraction']:.0%} of the step's FLOPs"
                                 if ac["recompute_flops_fraction"] else ""))
            hs = role["host_split"]
            if hs["pinned"] or hs["pageable"]:
                console.print(f"  host memory: {_fmt(hs['pinned'])} GiB pinned (page-locked), "
                              f"{_fmt(hs['pageable'])} GiB pageable")
            if explain:
                et = Table(title="How each figure is obtained", title_justify="left")
                for c in ("tier", "class", "item", "bytes", "life", "formula", "source"):
                    et.add_column(c, overflow="fold")
                for it in role["items"]:
                    et.add_row(it["tier"], it["class"], it["item"], f"{it['bytes']:,}", it["life"], it["formula"],
                               it["source"])
                console.print(et)
        if len(d["ranks"]) > 2:
            console.print(f"  ({n_other} other ranks in {len(d['ranks']) - 1} groups differ from this one by at most "
                          f"{spread / 2**30:,.2f} GiB in any tier: each keeps the gradients of the tensors touching "
                          f"its partition; --format json lists every rank)")
        if d["fit"]:
            ft = Table(title="Fit", title_justify="left")
            for c in ("tier", "scope", "peak need", "capacity", "headroom", "verdict"):
                ft.add_column(c, justify="right" if c in ("peak need", "capacity", "headroom") else "left")
            for f in d["fit"]:
                cap = f["capacity"]
                ft.add_row(f["tier"], f["scope"], f"{f['need'] / 1e9:,.2f} GB" + (f" ({f['phase']})" if f["phase"] else ""),
                           "unknown" if cap is None else f"{cap / 1e9:,.2f} GB",
                           "" if cap is None else f"{f['headroom'] / 1e9:,.2f} GB",
                           "give a capacity" if f["fits"] is None else ("fits" if f["fits"] else "[bold]DOES NOT FIT[/bold]"))
            console.print(ft)
        mv = d.get("movement")
        if mv and any(r["movements"] for r in mv["ranks"]):
            from advisor.traffic import movement_lines
            for line in movement_lines(mv):
                console.print(line, markup=False)
        ck = d.get("checkpoint")
        if ck and ck.get("files"):
            ct = Table(title="Durable checkpoint (engine.save_checkpoint; not activation checkpointing)",
                       title_justify="left")
            for c in ("file", "written by", "bytes", "GiB"):
                ct.add_column(c, justify="right" if c in ("bytes", "GiB") else "left")
            big = [f for f in ck["files"] if f["bytes"] >= 2**20]
            for f in big[:8]:
                ct.add_row(f.get("path") or f["name"], f"rank {f['rank']}", f"{f['bytes']:,}", _fmt(f["bytes"]))
            if len(big) > 8:
                ct.add_row(f"... {len(big) - 8} more files of the same kind", "", "", "")
            console.print(ct)
            console.print(f"  per save: {ck['per_save_bytes']:,} bytes ({_fmt(ck['per_save_bytes'])} GiB): tensor "
                          f"payload plus the small `latest` and recovery scripts; each .pt file adds a few KB of "
                          f"pickle overhead. `ds-advisor checkpoint` gives save/restore times and the save interval.")
        de = d.get("deepspeed_estimate")
        if de:
            if "error" in de:
                console.print(f"DeepSpeed's own estimate: {de['error']}", markup=False)
            else:
                worst = max(r["tiers"]["accelerator"]["total"] - r["tiers"]["accelerator"]["activations"]
                            for r in d["ranks"])
                console.print(f"DeepSpeed's own estimate ({de['function'].rsplit('.', 1)[-1]}, 1.5x buffer factor on "
                              f"host): {de['gpu_bytes_per_rank'] / 2**30:,.2f} GiB per GPU, "
                              f"{de['cpu_bytes_per_node'] / 2**30:,.2f} GiB host per node; this ledger: "
                              f"{worst / 2**30:,.2f} GiB of model states and buffers per rank on the accelerator",
                              markup=False)
        a = d["assumptions"]
        console.print("[bold]Assumptions[/bold]")
        console.print(f"  ZeRO stage {a['zero_stage']}: {a['sharding']}")
        console.print(f"  precision: model {a['precision']['model']}, gradient accumulation "
                      f"{a['precision']['grad_accum']}, communication {a['precision']['communication']}, "
                      f"master weights {a['precision']['master_weights']}")
        console.print(f"  optimizer: {a['optimizer']['type']} -> {a['optimizer']['basic']} "
                      f"wrapped by {a['optimizer']['wrapper']}")
        console.print(f"  offload_optimizer: {a['offload_optimizer']['written']} (effective: "
                      f"{a['offload_optimizer']['effective']}); offload_param: {a['offload_param']['written']} "
                      f"(effective: {a['offload_param']['effective']})")
        w = a["workload"]
        if w["seq_len"]:
            console.print(f"  workload: sequence {w['seq_len']}, micro-batch {w['micro_batch']}, checkpointing "
                          f"{w['checkpointing']}, attention {w['attention']}; fragmentation margin "
                          f"{a['fragmentation_margin']:.0%} on the accelerator peak")
        for n in a["notes"]:
            console.print(f"  note {n['pointer']}: {n['message']}")
        for x in a["excluded"]:
            console.print(f"  excluded: {x}")
        if d["findings"]:
            console.print("[bold]Findings[/bold]")
            for f in d["findings"]:
                console.print(f"  {f['severity']} {f['code']} {f['pointer']}: {f['message']}")
                if f["fix"]:
                    console.print(f"      fix: {f['fix']}")
    return captured.get().rstrip("\n")
