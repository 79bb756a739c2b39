"""Views: render lint results and estimates as text or JSON.

Text tables use rich (imported only when a table is printed); colour only on a terminal and
never when NO_COLOR is set. JSON shapes are stable and versioned (``schema_version``).
"""

from __future__ import annotations

import json
import shutil
import sys
from typing import IO, TYPE_CHECKING, Any

from advisor import DEEPSPEED_VERSION
from advisor.errors import EXIT_PROBE
from advisor.findings import Finding, render_sized
from advisor.render.style import STYLE, paint, use_color, width
from advisor.units import DEFAULT_UNITS, duration_text, gb, gib, rate, size, size_base, unit_name, unit_note
from advisor.config.versions import release_lines
from advisor.ledger.ranks import RankSet

if TYPE_CHECKING:
    from advisor.cluster.launch import Found
    from advisor.config.versions import Release
    from advisor.ledger.checkpoint import CheckpointPlan
    from advisor.views.check import CheckResult

# lint's renderers live in advisor.render.lint (lint imports only them); re-exported here.
from advisor.render.lint import (LINT_SCHEMA_VERSION, FileResult, _use_color, lint_json, lint_text,  # noqa: E402,F401
                                 safe_text)


_CLASS_LABEL = {
    "parameters": "16-bit parameters",
    "gradients": "gradients",
    "master_weights": "fp32 master weights",
    "optimizer_states": "optimizer moments",
    "activations": "activations",
    "workspace": "workspace/buffers",
}

#: The words the reports print for the estimate JSON's keys (its assumptions and a fit row's
#: phase): the one mapping the text renderer and the HTML report (advisor.render.html) share.
#: A key not listed reads as itself with spaces for underscores; DeepSpeed config keys
#: (offload_optimizer, offload_param) and HF arguments (low_cpu_mem_usage) stay as written.
KEY_WORDS = {
    "zero_stage": "ZeRO stage",
    "grad_accum": "gradient accumulation",
    "master_weights": "master weights",
    "seq_len": "sequence",
    "micro_batch": "micro-batch",
    "deepspeed_release": "release",
    "offload_optimizer": "offload_optimizer",
    "offload_param": "offload_param",
    "low_cpu_mem_usage": "low_cpu_mem_usage",
    "zero_init": "zero.Init",
    "zero_init_source": "zero.Init source",
    "low_cpu_mem_usage_source": "low_cpu_mem_usage source",
    "basic": "built as",
    "wrapper": "wrapped by",
    "first_step": "first step",
    "steady_step": "steady step",
}


def key_words(key: str) -> str:
    """The words for a JSON key (``"grad_accum"`` -> ``"gradient accumulation"``,
    ``"first_step"`` -> ``"first step"``): :data:`KEY_WORDS`, else the key with spaces for
    underscores."""
    return KEY_WORDS.get(key, key.replace("_", " "))




def excluded_words(x: str, m104_messages: "list[str]") -> str:
    """An exclusion as printed: the lower-bound reason that a shown M104 finding states in full (its message quotes
    ``assumptions.peak_lower_bound``) is named by its first clause and pointed to, so the text says it once."""
    if any(x in m for m in m104_messages):
        head, _, rest = x.partition(":")
        what = "not estimated" if rest.strip().startswith("not estimated") else "not modelled"
        return f"{head}: {what}, so the accelerator peak is a lower bound (finding M104 says what)"
    return x


def optimizer_words(o: dict[str, Any]) -> str:
    """"AdamW -> FusedAdam wrapped by DeepSpeedZeroOptimizer", or only the named optimizer when
    DeepSpeed would not build one (a refused config has no ledger)."""
    if not o.get("basic"):
        return f"{o['type']} (not built: DeepSpeed refuses this config, see the findings)"
    return f"{o['type']} -> {o['basic']}" + (f" wrapped by {o['wrapper']}" if o.get("wrapper") else "")


def box_or_records(title: str, head: tuple[str, ...], rows: list[tuple[str, ...]], right: tuple[bool, ...],
                   cols: int | None, wrap: int | None = 0, bold: frozenset[int] = frozenset(),
                   overflow: dict[int, str] | None = None) -> Any:
    """A rich box table (``head`` then ``rows``; ``right[i]``: column i right-aligned; rows whose
    index is in ``bold`` in bold) when it fits ``cols`` with no cell cut
    (:func:`advisor.render.style.table_fits`: only column ``wrap`` may fold, at its words), else
    the title and one ``label: value`` record per row (:func:`advisor.render.style.records`),
    never a cut header ("capaci…") or a label split from its value. Returns what
    ``console.print`` takes."""
    from rich.table import Table
    from rich.text import Text

    from advisor.render.style import records, table_fits

    if not table_fits([head, *rows], cols, wrap):
        return Text("\n".join([title, *records([head, *rows], cols or 100)]))
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(head):
        t.add_column(c, justify="right" if i < len(right) and right[i] else "left", no_wrap=i != wrap,
                     overflow=(overflow or {}).get(i, "ellipsis"))
    for k, r in enumerate(rows):
        t.add_row(*(Text(x, style="bold" if k in bold else "") for x in r))
    return t


def fit_table(fit: list[dict[str, Any]], units: str = DEFAULT_UNITS, cols: int | None = None) -> Any:
    """The fit table (a rich Table): per tier, the peak live bytes, each part the need adds on
    top of it (the fragmentation margin, runtime overheads) as its own row, then the need
    against the capacity with the headroom and the verdict, all in ``units``. When the table
    does not fit ``cols`` (:func:`advisor.render.style.table_fits`, the labels folding at their
    words), the same rows as lines (a rich Text): ``tier: peak live ... SIZE``, ``  + part SIZE``,
    ``  = need SCOPE SIZE; capacity ...; headroom ...: verdict``, each value glued to its label."""
    import textwrap

    from rich.table import Table
    from rich.text import Text

    from advisor.render.style import table_fits

    U = unit_name(units)
    title = f"Fit: each tier's peak live bytes, what the need adds, the need ({unit_note(units)})"
    head = ("tier", "", U, f"capacity\n{U}", f"headroom\n{U}", "verdict")
    blocks = []  # per tier: (rows, verdict)
    for f in fit:
        cap = f["capacity"]
        peak = f.get("peak", f["need"])
        verdict = capacity_wanted(f["tier"], short=True) if f["fits"] is None else ("fits" if f["fits"] else "DOES NOT FIT")
        lb = ">= " if f.get("lower_bound") else ""  # the peak is a floor (rule M104): so is every need from it
        if f.get("verdict") == "tight":  # a lower-bound peak (M104) and/or inside the overhead's band (M102): each named
            band = 0 <= (f["headroom"] or 0) < f["uncertainty"]
            why = (["peak is a lower bound: M104"] if lb else []) + (
                # the band: how far the runtime overhead terms may exceed their estimates (each term's high - default)
                [f"the headroom is inside the runtime-overhead band: up to {size(f['uncertainty'], units)} more if "
                 f"{', '.join(f['uncertain_terms'])} reach their band's top"] if band else [])
            verdict = f"TIGHT ({'; '.join(why)})"
        phase = key_words(f.get("phase") or "")  # "first_step": the JSON's key, in words
        rows = [(f["tier"], "peak live" + (f" ({phase})" if phase else ""),
                 lb + size(peak, units, suffix=False), "", "", "")]
        rows += [("", "+ " + p["label"], size(p["bytes"], units, suffix=False), "", "", "")
                 for p in f.get("parts") or []]
        rows.append(("", "= need", lb + size(f["need"], units, suffix=False),
                     "unknown" if cap is None else size(cap, units, suffix=False),
                     "" if cap is None else size(f["headroom"], units, suffix=False), verdict))
        # the scope under the tier's name, next to the peak-live row (not rows below it): the
        # host row's peak is the node's sum, the state table above it per rank
        rows[1] = (f["scope"], *rows[1][1:])
        blocks.append((rows, verdict, f))

    def _style(v: str) -> str:
        return STYLE["TIGHT"] if v.startswith("TIGHT") else STYLE["give a capacity"] if v.startswith("give ") \
            else STYLE.get(v, "")

    if table_fits([head, *(r for rows, _, _ in blocks for r in rows)], cols, wrap=1):
        ft = Table(title=title, title_justify="left")
        for i, c in enumerate(head):
            ft.add_column(c, justify="right" if U in c else "left", no_wrap=i != 1)
        for rows, verdict, _ in blocks:
            for k, r in enumerate(rows):
                last = k == len(rows) - 1
                ft.add_row(*r[:5], Text(r[5], style=_style(verdict)) if last else r[5], end_section=last)
        return ft
    nb = "\u00a0"  # a no-break space: a value never leaves its label's line

    def _lines(text: str, lead: str) -> list[str]:
        return [x.replace(nb, " ") for x in textwrap.wrap(text, cols or 100, initial_indent=lead,
                                                           subsequent_indent=lead + "    ", break_on_hyphens=False,
                                                           break_long_words=False)]

    out = Text(title)
    for rows, verdict, f in blocks:
        first, *parts, need = rows
        lb = ">=" + nb if f.get("lower_bound") else ""
        for x in _lines(f"{first[0]}, {f['scope']}: {first[1]} {lb}{size(f.get('peak', f['need']), units).replace(' ', nb)}", ""):
            out.append("\n" + x)
        for r, p in zip(parts, f.get("parts") or []):
            for x in _lines(f"{r[1]} {size(p['bytes'], units).replace(' ', nb)}", "  "):
                out.append("\n" + x)
        cap = f["capacity"]
        text = (f"= need {f['scope']} {lb}{size(f['need'], units).replace(' ', nb)}; capacity "
                + ("unknown" if cap is None else size(cap, units).replace(" ", nb))
                + ("" if cap is None else f"; headroom {size(f['headroom'], units).replace(' ', nb)}") + ": ")
        if f["fits"] is None:  # the lines have room for every source of the capacity, not only the flag
            verdict = capacity_wanted(f["tier"])
        lines = _lines(text + verdict.replace(" ", nb) if len(verdict) < 20 else text + verdict, "  ")
        # the verdict is styled from its first word on, on whichever wrapped line that word lands
        # (a long TIGHT verdict wraps after it), through the verdict's continuation lines
        word = verdict.split(" ")[0]
        at = next((i for i in range(len(lines) - 1, -1, -1) if word in lines[i]), len(lines))
        for i, x in enumerate(lines):
            out.append("\n")
            if i < at:
                out.append(x)
            elif i == at:
                cut = x.rfind(word)
                out.append(x[:cut])
                out.append(x[cut:], style=_style(verdict))
            else:
                body = x.lstrip()
                out.append(x[:len(x) - len(body)])
                out.append(body, style=_style(verdict))
    return out


#: What gives each fit tier its capacity, named in the verdict when none was given (a reader told only
#: "give a capacity" had to find the flag): the estimate flag (advisor/cli.py OPTIONS), or a --hardware spec.
CAPACITY_SOURCES = {"accelerator": ("--gpu-memory", "a --hardware preset"),
                    "host": ("--host-memory", "a --hardware preset with host memory"),
                    "nvme": ("--nvme-capacity", "a --hardware spec with a storage tier")}


def capacity_wanted(tier: str, short: bool = False) -> str:
    """The fit verdict of a tier whose capacity is unknown: "give" and what gives it (:data:`CAPACITY_SOURCES`):
    "give --host-memory or a --hardware preset with host memory"; ``short`` (the fit table's verdict column):
    the flag alone, "give --host-memory"."""
    flag, spec = CAPACITY_SOURCES.get(tier, ("a capacity", ""))
    return f"give {flag}" + ("" if short or not spec else f" or {spec}")


def activation_words(ac: dict[str, Any], mode: str | bool, units: str = DEFAULT_UNITS, pipeline: bool = False) -> str:
    """The activations line's words, so a product is only printed where it is the total.

    ``mode``: the recompute (``ranks[].activations.recompute``: "none", "full", "layers" (k of L
    checkpointed), "selective"; True/False for full/none). Without recompute "80 layers x 1.52 GiB
    each = 121.60 GiB kept for backward" (the saved bytes less the loss head, which
    :func:`activation_row_words` adds); under pipeline parallelism (``pipeline``) the micro-batches in
    flight (``in_flight``) are a factor of it, with their source
    (:data:`advisor.model.activations.IN_FLIGHT_SOURCE`). With recompute, what is saved for backward,
    and the one-layer figure only as what a layer would keep without recompute."""
    from advisor.model.activations import IN_FLIGHT_SOURCE
    mode = {True: "full", False: "none"}.get(mode, mode)  # type: ignore[arg-type]
    n = ac["layers_on_rank"]
    f = ac.get("in_flight") or 1
    flight = (f" x {f} micro-batch{'es' if f != 1 else ''} in flight ({IN_FLIGHT_SOURCE})"
              if pipeline or f != 1 else "")
    in_saved = (f" ({f} micro-batch{'es' if f != 1 else ''} in flight: {IN_FLIGHT_SOURCE})"
                if pipeline or f != 1 else "")
    if mode == "sac" and (ac.get("sac_policy") or {}).get("scope") == "model":  # the whole-model MILP's choice
        k = ac.get("checkpointed_layers", n)
        return (f"op-level selective checkpointing in {k} of the {n} layers, chosen by torch's whole-model MILP "
                f"under {size((ac.get('sac_policy') or {}).get('budget_bytes') or 0, units)} of activations; saved "
                f"for backward {size(ac['saved_accelerator'], units)} on the accelerator (loss head included)"
                + in_saved)
    if mode == "sac":  # trace mode: per_layer is what a layer keeps under the op-level policy
        return (f"op-level selective checkpointing in the {n} layers (torch's SAC policy: the ops it picks are "
                f"kept, the rest recomputed in backward): {n} layers x {size(ac['per_layer'], units)} each; saved "
                f"for backward {size(ac['saved_accelerator'], units)} on the accelerator (loss head included)"
                + in_saved)
    if mode in (None, "", "none"):
        kept = ac["saved_accelerator"] - (ac.get("loss_head") or 0)
        pk = ac.get("pipe_kept") or 0  # what the PipelineEngine keeps of each micro-batch (activations.pipe_kept)
        if pk and (n * ac["per_layer"] + pk) * f == kept:
            return (f"no checkpointing: ({n} layers x {size(ac['per_layer'], units)} each + {size(pk, units)} the "
                    "PipelineEngine keeps: a stage's output before the last, the first stage's input-ids clone)"
                    f"{flight} = {size(kept, units)} kept for backward")
        if n * ac["per_layer"] * f == kept:
            return (f"no checkpointing: {n} layers x {size(ac['per_layer'], units)} each{flight} = "
                    f"{size(kept, units)} kept for backward")
        ls = ac.get("layers_shared") or 0  # RoPE's cos and sin, saved once for every layer (activations.py)
        if ls and n * ac["per_layer"] * f + ls == kept:
            return (f"no checkpointing: {n} layers x {size(ac['per_layer'], units)} each{flight} + "
                    f"{size(ls, units)} RoPE's cos and sin (one pair for every layer) = {size(kept, units)} kept "
                    "for backward")
        # layers of different sizes (MoE after dense layers): the largest is not each layer's
        return (f"no checkpointing: {n} layers (the largest {size(ac['per_layer'], units)}){flight}: "
                f"{size(kept, units)} kept for backward")
    how = {"full": f"full checkpointing: the {n} layers keep only their inputs",
           "layers": f"{ac.get('checkpointed_layers')} of the {n} layers checkpointed (they keep only their input and "
                     "are recomputed in backward)",
           "selective": f"selective recompute in the {n} layers (the attention core is recomputed, its q, k, v kept)",
           }.get(mode, f"recompute {mode}")
    return (how + f"; saved for backward {size(ac['saved_accelerator'], units)} on the accelerator"
            + (f", {size(ac['saved_host'], units)} on the host" if ac.get("saved_host") else "")
            + " (loss head included)" + in_saved
            + (_recompute_words(ac, units) if ac.get("recompute_layer") else "")
            + (f"; each layer keeps {size(ac['per_layer'], units)}" if mode == "selective"
               else f"; without recompute each layer would keep {size(ac['per_layer'], units)}"))


#: The step's activation transients on top of what is saved for backward (advisor.model.activations.
#: ActivationEstimate: ``loss_spike``, ``loss_backward_spike``, ``recompute_layer``), for figures without
#: ``backward_moments`` (:func:`_row_transients`): the row adds the largest only, as none is live with another.
#: In the step's time order (the row's words say which of them is freed before the largest, which comes after it).
_TRANSIENTS = (("loss_spike", "the forward's fp32 logits copy"),
               ("loss_backward_spike", "the loss backward's fp32 gradients"),
               ("recompute_layer", "one layer recomputed in backward"))


def _row_transients(ac: dict[str, Any]) -> list[tuple[int, str]]:
    """(bytes above ``saved_accelerator``, words) of each candidate for the row's transient: forward's loss spike
    and each of backward's moments (``backward_moments``: start, lm_head's where ``own_backward``, the layers', the
    end; the largest of a kind), whose largest the row adds (``ActivationEstimate.peak_accelerator``);
    :data:`_TRANSIENTS` where the figures carry no moments. A moment below the saved bytes (backward has freed more
    than it holds) is a negative candidate, never the largest: forward's spike is at least 0."""
    moms = ac.get("backward_moments")
    if not moms:
        return [(ac.get(k) or 0, words) for k, words in _TRANSIENTS]
    saved, own = ac["saved_accelerator"], ac.get("own_backward", True)
    rec = " with one layer recomputed" if ac.get("recompute") not in (None, "none") else ""
    layer = f"a layer's own backward{rec}" if own else f"layer L-1's backward{rec}"
    names = (["the loss backward's fp32 gradients"] + (["lm_head's backward with its gradients"] if own else [])
             + [layer] * (len(moms) - 3 - (1 if own else 0)) + [f"layer L-1's backward{rec}" if not own else layer]
             + ["the end of backward"])
    best: dict[str, int] = {}
    for m, w in zip(moms, names):
        best[w] = max(best.get(w, m - saved), m - saved)
    return [(ac.get("loss_spike") or 0, _TRANSIENTS[0][1])] + [(b, w) for w, b in best.items()]


def activation_row_words(ac: dict[str, Any], mode: str | bool, units: str = DEFAULT_UNITS) -> str:
    """Every term of the accelerator activations row (``ranks[].tiers.accelerator.activations``) after
    :func:`activation_words`, ending in that row's figure: the loss head (without recompute; with it the
    saved figure includes it), the largest of the step's transients (:data:`_TRANSIENTS`; the smaller ones
    named as not added: they are not live together), and the ledger's own activation entries
    (``row_items``: the PipelineEngine's kept buffers). The terms are ``saved_accelerator`` +
    max(transients) + the entries (``ActivationEstimate.peak_accelerator`` + ``Role.step_entries``)."""
    mode = {True: "full", False: "none"}.get(mode, mode)  # type: ignore[arg-type]
    none = mode in (None, "", "none")
    # without recompute the line so far ends in the layers' kept bytes; with it, in other words
    parts = [] if none else [f"; the row: saved {size(ac['saved_accelerator'], units)}"]
    if none and ac.get("loss_head"):
        parts.append(f"+ loss head {size(ac['loss_head'], units)}")
    trans = _row_transients(ac)
    top = max(trans, key=lambda x: x[0])
    if top[0]:
        # the candidates are in time order: each smaller one is freed before the largest or comes after it is freed
        i_top = trans.index(top)
        others = [(f"{w}, {size(b, units)}", "is freed before this" if i < i_top else "comes after this is freed")
                  for i, (b, w) in enumerate(trans) if b > 0 and i != i_top]
        if len(others) == 1:
            left = f"; {others[0][0]}, {others[0][1]} and is not added"
        elif others:
            left = "; not added, as none is live with it: " + "; ".join(
                f"{x}, {'freed before this' if when.startswith('is freed') else 'after this'}" for x, when in others)
        else:
            left = ""
        parts.append(f"+ {top[1]} {size(top[0], units)} (the largest transient{left})")
    items = [x for x in ac.get("row_items") or [] if x["bytes"]]
    parts += [f"+ {x['item']} {size(x['bytes'], units)}" for x in items]
    total = ac["saved_accelerator"] + top[0] + sum(x["bytes"] for x in items)
    return ((" " if none and parts else "") + " ".join(parts) + f" = {size(total, units)}"
            + (", the activations row" if none else ""))


def _recompute_words(ac: dict[str, Any], units: str) -> str:
    """What one recomputed layer adds at its backward peak, with what backward has freed by then
    when that is subtracted (``recompute_layer_peak``, ``recompute_freed``): "+6.40 GiB at its
    backward peak, less 2.23 GiB the finished loss head freed = +4.17 GiB net" rather than only the
    net, which read as the layer's whole peak."""
    net, gross, freed = ac["recompute_layer"], ac.get("recompute_layer_peak") or 0, ac.get("recompute_freed") or 0
    if not freed or not gross:
        return f"; backward recomputes one layer at a time (+{size(net, units)})"
    what = ("the un-checkpointed layers' activations; with eager attention the loss head's tensors too"
            if ac.get("recompute") == "layers" else "the loss head's tensors")  # full: only eager frees the head
    return (f"; backward recomputes one layer at a time: {size(gross, units)} at that layer's backward peak, less "
            f"{size(freed, units)} backward has freed by then ({what}) = +{size(net, units)} on top of what is "
            "saved")


def estimate_text(result: Any, explain: bool = False, stream: IO[str] | None = None,
                  units: str = DEFAULT_UNITS, color: bool | None = None) -> str:
    """Per-role tables (rows = state classes, columns = tiers, in ``units``: GiB or GB) then fit,
    assumptions, findings. ``color``: None = on a terminal without NO_COLOR."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    stream = stream or sys.stdout
    U = unit_name(units)

    def _fmt(n: int) -> str:
        return size(n, units, suffix=False, zero="-")

    color = use_color(stream) if color is None else color
    cols = width(stream)
    console = Console(file=stream, no_color=not color, force_terminal=color, color_system="standard" if color else None,
                      width=cols, height=25, highlight=False, soft_wrap=True)  # height too: rich reads
    # COLUMNS / LINES itself (int() of any str.isdigit() text: "²" or 5,000 digits raised) unless both are given
    d = result.to_dict(rank_sets=True)  # ranks as ranges: a 2^20-rank role is one range
    with console.capture() as captured:
        m = d["model"]
        cl = d["cluster"]
        console.print(f"[bold]{d['config']}[/bold]: {m['name']} ({param_words(m)}), world size {cl['world_size']}"
                      f"{world_default_words(cl.get('world_size_source'))} (data-parallel {cl['dp_world_size']}"
                      + "".join(f", {w} {cl[k]}" for k, w in (("tensor_parallel", "tensor-parallel"),
                                                            ("pipeline_parallel", "pipeline stages"),
                                                            ("sequence_parallel", "Ulysses sequence-parallel"),
                                                            ("expert_parallel", "expert-parallel"))
                                if (cl.get(k) or 1) > 1)
                      + f"); DeepSpeed {d['accounting_release']} accounting")
        from advisor.config.versions import current_release, is_verified, release_note
        if not is_verified(current_release()):
            console.print(f"[yellow]release: {release_note()}; {d['accounting']}[/yellow]")
        else:
            console.print(f"release: {release_note()}")
        shown = d["ranks"]
        staged = any("stages" in r for r in shown)
        if staged:
            # Pipeline stages hold different layers: show the worst role of each distinct set of
            # stages, and say which is the worst overall.
            best: dict = {}
            for r in shown:
                k = tuple(r["stages"])
                if k not in best or r["peak"]["accelerator"]["bytes"] > best[k]["peak"]["accelerator"]["bytes"]:
                    best[k] = r
            worst_all = max(best.values(), key=lambda r: r["peak"]["accelerator"]["bytes"])
            # which ranks each shown row stands for (issue ncb21: TP4 x PP2 x DP2 said "stage 0: ranks 0-3"
            # for a stage of ranks 0-7): every rank of its stages with the same bytes per tier and class
            # (the table), the same timeline (the timeline), in DeepSpeed's rank order (_stage_titles)
            titles = _stage_titles(d["ranks"], best)
            n_other = sum(len(r["ranks"]) for r in shown
                          if r["tiers"] != best[tuple(r["stages"])]["tiers"])
            spread = max((abs(r["tiers"][t]["total"] - best[tuple(r["stages"])]["tiers"][t]["total"]) for r in shown
                          for t in ("accelerator", "host", "nvme")), default=0)
            shown = sorted(best.values(), key=lambda r: r["stages"][0])
        elif len(shown) > 2:
            # Ranks of ZeRO-1/2 differ by the gradients of tensors straddling their slices: show
            # the rank with the largest accelerator peak and say how far the others are from it.
            worst = max(shown, key=lambda r: r["peak"]["accelerator"]["bytes"])
            spread = max(abs(r["tiers"][t]["total"] - worst["tiers"][t]["total"]) for r in shown
                         for t in ("accelerator", "host", "nvme"))
            n_other = sum(len(r["ranks"]) for r in shown if r is not worst)
            shown = [worst]
        for role in shown:
            title = line_title = _ranks_title(role["ranks"])
            peak_of = None  # the ranks the peak line is of, where fewer than the table's
            if "stages" in role:
                worst_words = " (the worst)" if staged and role is worst_all and len(shown) > 1 else ""
                if staged:
                    title, line_title, peak_of = titles[tuple(role["stages"])]
                    title, line_title = title + worst_words, line_title + worst_words
                else:
                    st = role["stages"]
                    title = line_title = (f"pipeline stage{'s' if len(st) > 1 else ''} {', '.join(map(str, st))}: "
                                          f"{title}{worst_words}")
            head = ("state class", *(tier + (" (pinned+pageable)" if tier == "host" else "") + f"\n{U}"
                                      for tier in ("accelerator", "host", "nvme")))
            rows = []
            for cls, label in _CLASS_LABEL.items():
                if cls == "activations" and role.get("activations") is None:
                    rows.append((label, "not estimated", "", ""))
                    continue
                rows.append((label, *(_fmt(role["tiers"][tier][cls]) for tier in ("accelerator", "host", "nvme"))))
            rows.append(("sum of the rows", *(_fmt(role["tiers"][x]["total"]) for x in ("accelerator", "host", "nvme"))))
            console.print(box_or_records(f"Per-rank training state, {title} ({unit_note(units)})", head, rows,
                                         (False, True, True, True), cols, bold=frozenset({len(rows) - 1})))
            console.print("  (each row is the class's largest size; the rows are not all live at once, and load, "
                          "save and step transients are only on the timeline: the peak below is what is live "
                          "together)", markup=False)
            a_w = d["assumptions"]["workload"]
            pk = role["peak"]
            lb = d["assumptions"].get("peak_lower_bound")
            console.print("  peak live at once" + (f" ({peak_of}; the timeline below)" if peak_of else "") + ": " + "; ".join(
                f"{tier} {'>= ' if lb and tier == 'accelerator' else ''}{size(pk[tier]['bytes'], units)} at "
                f"{pk[tier]['label']}" for tier in ("accelerator", "host", "nvme")
                if pk[tier]["bytes"]), markup=False)
            if lb:
                # the reason is printed once, as finding M104 (and among the assumptions' exclusions); here
                # only when M104 is not among the findings (suppressed in the config)
                if any(f.get("code") == "M104" for f in d.get("findings") or ()):
                    console.print("  warning: the accelerator peak is a lower bound: what it leaves out is "
                                  "finding M104 below", markup=False)
                else:
                    console.print(safe_text(f"  warning: the accelerator peak is a lower bound: {lb}"), markup=False)
            for tier in ("accelerator", "host"):
                if pk[tier]["bytes"] and pk[tier].get("top"):
                    console.print(f"    {tier} at its peak ({U}): " + ", ".join(
                        f"{c['item']} {_fmt(c['bytes'])}" for c in pk[tier]["top"]), markup=False)
            if role.get("timeline"):
                rows = []
                for row in role["timeline"]:
                    marks = [("*" if pk[x]["bytes"] and pk[x]["instant"] == row["instant"] else "") for x in
                             ("accelerator", "host", "nvme")]
                    rows.append((row["label"], *(f"{'>=' if lb and x == 'accelerator' and m else ''}{_fmt(row[x])}{m}"
                                                 for x, m in zip(("accelerator", "host", "nvme"), marks))))
                # the unit in the header, as the fit table
                console.print(box_or_records(f"Step timeline, {line_title}: live bytes at each instant ({U})",
                                             ("instant", *(f"{tier}\n{U}" for tier in ("accelerator", "host", "nvme"))),
                                             rows, (False, True, True, True), cols))
                console.print("  (* = the tier's peak instant" + ("; >= the accelerator's is a lower bound, M104)"
                                                                  if lb else ")"))
            if role.get("activations"):
                ac = role["activations"]
                mode = ac.get("recompute") or ("full" if a_w["checkpointing"] == "full" else "none")
                saves = (ac.get("peak_without_recompute") or 0) - (ac.get("peak_accelerator") or (
                    ac["saved_accelerator"] + max(ac["loss_spike"], ac.get("loss_backward_spike") or 0,
                                                  ac["recompute_layer"])))
                console.print("  activations: " + activation_words(ac, mode, units, pipeline=staged)
                              + activation_row_words(ac, mode, units)
                              + (f"; recomputation saves {size(saves, units)} at the peak and adds "
                                 f"{ac['recompute_flops_fraction']:.0%} of the step's FLOPs"
                                 if ac["recompute_flops_fraction"] else ""))
            hs = role["host_split"]
            if hs["pinned"] or hs["pageable"]:
                console.print(f"  host memory: {size(hs['pinned'], units)} pinned (page-locked), "
                              f"{size(hs['pageable'], units)} pageable")
            if explain:  # one block per item: formula and source are prose, too long for table cells
                console.print("How each figure is obtained (bytes; deepspeed/ file:function)", markup=False)
                for it in role["items"]:
                    console.print(f"  {it['tier']} {it['class']} {it['item']}: {it['bytes']:,} bytes "
                                  f"({size(it['bytes'], units)}), life {it['life']}", markup=False)
                    console.print(f"      formula: {it['formula']}", markup=False)
                    console.print(f"      source: {it['source']}", markup=False)
        if staged and n_other:
            console.print(f"  ({n_other} other ranks differ from their stage's row above by at most "
                          f"{size(spread, units)} in any tier; --format json lists every rank)")
        elif not staged and len(d["ranks"]) > 2:
            console.print(f"  ({n_other} other ranks in {len(d['ranks']) - 1} groups differ from this one by at most "
                          f"{size(spread, units)} in any tier: each keeps the gradients of the tensors touching "
                          f"its partition; --format json lists every rank)")
        if d["fit"]:
            console.print(fit_table(d["fit"], units, cols))
            for f in d["fit"]:  # where each runtime overhead row comes from, under its tier's name
                if f.get("overhead"):
                    console.print(f"  where the {f['tier']} rows' runtime overheads come from:", markup=False)
                for t in f.get("overhead") or []:
                    band = "" if t["low"] == t["high"] else f" (band {size(t['low'], units)}-{size(t['high'], units)})"
                    console.print(f"  + {t['name']}{band}: {t['formula']} [{t['source']}]", markup=False)
        stt = d.get("step_time")
        if stt:
            for line in step_time_lines(stt, (d.get("movement") or {}).get("step_time_s"), units):
                console.print(line, markup=False)
        mv = d.get("movement")
        if mv and any(r["movements"] for r in mv["ranks"]):
            for line in movement_lines(mv, units, cols):
                console.print(line, markup=False)
        ck = d.get("checkpoint")
        if ck and ck.get("files"):
            big = checkpoint_rank_rows([f for f in ck["files"] if f["bytes"] >= 2**20])
            rows = [(path, who, f"{b:,}", _fmt(b)) for path, who, b, _ in big[:8]]
            if len(big) > 8:
                rest = big[8:]
                rows.append((f"... {sum(n for *_, n in rest):,} more files, none larger than "
                             f"{_fmt(rest[0][2])} {U} (--format json lists every file)", "", "", ""))
            console.print(box_or_records("Durable checkpoint (engine.save_checkpoint; not activation checkpointing)",
                                         ("file", "written by", "bytes", U), rows, (False, False, True, True), cols,
                                         wrap=None))
            console.print(f"  per save: {ck['per_save_bytes']:,} bytes ({size(ck['per_save_bytes'], units)}): tensor "
                          f"payload plus the small `latest` and recovery scripts; each .pt file adds a few KB of "
                          f"pickle overhead. `ds-advisor checkpoint` gives save/restore times and the save interval.")
            # --save-dir: the tier's wear, or why it is not counted (the step-time section exists iff --hardware)
            for line in estimate_save_dir_lines(ck.get("storage"), d.get("step_time") is not None, units):
                console.print(line, markup=False)
        de = d.get("deepspeed_estimate")
        if de:
            if "error" in de:
                console.print(f"DeepSpeed's own estimate: {de['error']}", markup=False)
            else:
                worst = max(r["tiers"]["accelerator"]["total"] - r["tiers"]["accelerator"]["activations"]
                            for r in d["ranks"])
                console.print(f"DeepSpeed's own estimate ({de['function'].rsplit('.', 1)[-1]}, 1.5x buffer factor on "
                              f"host): {size(de['gpu_bytes_per_rank'], units)} per GPU, "
                              f"{size(de['cpu_bytes_per_node'], units)} host per node; this ledger: "
                              f"{size(worst, units)} of model states and buffers per rank on the accelerator",
                              markup=False)
        if d.get("unsupported"):  # DeepSpeed (or, for an H rule, the HF Trainer / accelerate) refuses the config
            who = "the HF Trainer or accelerate" if str(d["unsupported"]).startswith("H") else "DeepSpeed"
            console.print(f"No estimate: {who} would refuse this config before training starts; fix the error "
                          "finding(s) below first", markup=False)
        else:
            a = d["assumptions"]
            console.print("[bold]Assumptions[/bold]")
            console.print(f"  {key_words('zero_stage')} {a['zero_stage']}: {a['sharding']}")
            console.print(f"  precision: model {a['precision']['model']}, {key_words('grad_accum')} "
                          f"{a['precision']['grad_accum']}, communication {a['precision']['communication']}, "
                          f"{key_words('master_weights')} {a['precision']['master_weights']}")
            console.print("  optimizer: " + optimizer_words(a["optimizer"]), markup=False)
            oo = a["offload_optimizer"]
            split = ""
            if "sub_groups_on_host" in oo:  # ZeRO-3 partial offload: the ratio splits per sub-group
                split = (f", ratio {oo['ratio']:g}: optimizer state of {oo['sub_groups_on_host']} sub-group(s) per rank on "
                         f"the host, {oo['sub_groups_on_accelerator']} on the accelerator")
                if "sub_groups_on_nvme" in oo:
                    split += (f", {oo['sub_groups_on_nvme']} swapped to NVMe ({oo['sub_groups_on_nvme_backup_stepped']} of "
                              "them stepped by the backup AdamW, their moments in host memory)")
                if not oo["sub_groups_on_host"] and not oo.get("sub_groups_on_nvme"):
                    split += " (only the gradient partitions on the host)"
            console.print(f"  offload_optimizer: {oo['written']} (effective: {oo['effective']}{split}); "
                          f"offload_param: {a['offload_param']['written']} (effective: {a['offload_param']['effective']})")
            ra = a.get("deepspeed_release")
            if ra:
                console.print(f"  release: {ra['release']}; {ra['accounting']}", markup=False)  # defaults: notes
            ld = d.get("load")
            if ld:
                per_rank, n, node = ld["host_per_rank"], ld["ranks_per_node"], ld["host_per_node"]
                host = (f"host {size(per_rank, units)} per rank x {n} ranks = {size(node, units)} per node"
                        if per_rank * n == node else
                        f"host {size(per_rank, units)} on the worst rank, {size(node, units)} per node ({n} ranks"
                        + (f"; rank 0 alone holds the checkpoint's state dict, {ld['state_dict_dtype']}, while "
                           "from_pretrained loads it)" if ld.get("state_dict_dtype") else ")"))
                console.print(f"  load phase: zero.Init {'yes' if ld['zero_init'] else 'no'} ({ld['zero_init_source']}); "
                              f"dtype {ld['dtype']} ({ld['dtype_source']}); low_cpu_mem_usage "
                              f"{'yes' if ld['low_cpu_mem_usage'] else 'no'}: {host}"
                              + ((f"; per pipeline stage: {ld['per_stage']}" if ld.get("pipeline_build") != "whole"
                                  else f"; pipeline build whole ({ld['pipeline_build_source']}): {ld['per_stage']}")
                                 if ld.get("per_stage") else "")
                              + (f"; under tensor / expert parallelism: {ld['per_shard']}" if ld.get("per_shard") else ""),
                              markup=False)
            w = a["workload"]
            if w["seq_len"]:
                console.print(f"  workload: {key_words('seq_len')} {w['seq_len']}, "
                              f"{key_words('micro_batch')} {w['micro_batch']}, checkpointing "
                              f"{w['checkpointing']}, attention {w['attention']}")
            for n in a["notes"]:
                console.print(safe_text(f"  note {n['pointer']}: {n['message']}"), markup=False)  # a key's [..] too
            m104 = [f.text(units)[0] for f in result.findings if f.code == "M104"]
            for x in a["excluded"]:
                console.print(safe_text(f"  excluded: {excluded_words(x, m104)}"), markup=False)
        if d["findings"]:
            console.print("[bold]Findings[/bold]")
            from advisor.render.lint import hf_hint_lines, location_prefix
            hint, folded = hf_hint_lines(result.findings, "estimate", d["config"])  # "auto" as lint folds it
            for msg, fix in hint:
                line = Text("  ")
                line.append("error", style=STYLE.get("error", ""))
                line.append(f" A001 /: {msg}")
                console.print(line)
                console.print(f"      fix: {fix}", markup=False)
            for f in result.findings:  # the Findings behind d["findings"], sizes in ``units``
                if id(f) in folded:
                    continue
                msg, fix = f.text(units)
                line = Text("  " + location_prefix(f))  # file:line:column, as check and lint print it
                line.append(f.severity, style=STYLE.get(f.severity, ""))
                line.append(f" {f.code} {f.shown_pointer}: {msg}")
                console.print(line)
                if fix:
                    console.print(f"      fix: {fix}", markup=False)
    return captured.get().rstrip("\n")  # folded to the width by advisor.render.render


#: Up to this many ranks a role of scattered ranks is titled by listing each; above, by its ranges.
LIST_RANKS_IN_TITLE = 64


def param_words(m: dict[str, Any]) -> str:
    """'8,030,261,248 parameters, all trainable' for a model dict (``parameters``,
    ``trainable_parameters``, ``name``); the count is said once: left out when the name already
    shows it (``--params 7,000,000,000``), and 'all trainable' when every parameter is."""
    n, t = m["parameters"], m["trainable_parameters"]
    words = [] if f"{n:,}" in str(m.get("name", "")) else [f"{n:,} parameters"]
    words.append("all trainable" if t == n else f"{t:,} trainable")
    return ", ".join(words)


def checkpoint_rank_rows(files: list[dict]) -> list[tuple[str, str, int, int]]:
    """(path, written by, bytes of each file, number of files) rows of estimate's checkpoint files
    (``checkpoint.files`` of its JSON), one row for the files that differ only in the rank number of
    their name (``..._rank_3_...``) and have the same bytes: 'global_step{N}/bf16_zero_pp_rank_{r}_
    mp_rank_00_optim_states.pt' written by 'ranks 0-7, each' instead of eight identical lines. A file
    the JSON already counts (``count`` > 1) keeps its 'N ranks, each'. Largest files first (a
    stable sort: equal sizes keep the JSON's order), so a cut list never hides the largest."""
    import re
    groups: dict[tuple[str, int], list[dict]] = {}
    for f in files:
        path = f.get("path") or f["name"]
        key = (re.sub(r"(?<=_rank_)\d+(?=_mp_rank)", "{r}", path), f["bytes"]) \
            if f.get("count", 1) == 1 and "rank" in f else (path, -1 - len(groups))
        groups.setdefault(key, []).append(f)
    rows = []
    for (pattern, _), fs in groups.items():
        f = fs[0]
        if len(fs) > 1:
            rows.append((pattern, _ranks_title([x["rank"] for x in fs]) + ", each", f["bytes"], len(fs)))
        else:
            n = int(f.get("count", 1))
            rows.append((f.get("path") or f["name"], f"{n} ranks, each" if n > 1 else f"rank {f['rank']}",
                         f["bytes"], n))
    return sorted(rows, key=lambda r: -r[2])


def _ranks_title(ranks: Any) -> str:
    """'rank 3', 'ranks 0-7' (consecutive), 'ranks 1, 3, 5' (scattered, up to
    :data:`LIST_RANKS_IN_TITLE`), else 'ranks 0-3, 8-11, ... (N ranks)' from the ranges."""
    rs = ranks if isinstance(ranks, RankSet) else RankSet.of(ranks)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs.ranges) == 1:
        return f"ranks {rs[0]}-{rs[-1]}"
    if len(rs) <= LIST_RANKS_IN_TITLE:
        return f"ranks {', '.join(map(str, rs))}"
    spans = [f"{a}" if b == a + 1 else f"{a}-{b - 1}" for a, b in rs.ranges]
    return f"ranks {', '.join(spans[:8])}{', ...' if len(spans) > 8 else ''} ({len(rs):,} ranks)"


#: The hardware spec's figure that times each movement link (schemas/hardware.schema.json), named in the
#: movement table's note on its "?" times.
LINK_BANDWIDTH_WORDS = {"pcie": "pcie (the host link, host_link)", "network": "network (network_bytes_per_s)",
                        "nvme": "nvme (the storage tier's read_bytes_per_s / write_bytes_per_s)"}


def _stage_titles(roles: list[dict], best: dict) -> dict[tuple, tuple[str, str, str | None]]:
    """(table title, timeline title, the timeline's ranks where fewer than the table's) of each stage set's shown role ``best[stages]`` among ``roles``
    (estimate's JSON roles with ``stages`` and ``ranks`` as RankSets): "pipeline stage S: ranks ..."
    naming every rank of those stages whose bytes per tier and class are the shown row's (the table)
    or whose timeline and peaks are too (the timeline), with the stage's whole rank set in brackets
    where they are fewer. A stage's ranks are those of the roles of its stages: global rank =
    (stage x data-parallel size + data-parallel rank) x tensor size + tensor rank
    (``plan.Cluster.coords``), DeepSpeed 0.19.8's ``PipeModelDataParallelTopology`` axes
    ['pipe', 'data', 'model'] (``runtime/pipe/topology.py`` l.244-248) numbered by
    ``ProcessTopology.__init__``'s cartesian product, the last axis fastest (l.26-47)."""
    from functools import reduce

    out = {}
    for k, role in best.items():
        mine = [r for r in roles if tuple(r["stages"]) == k]
        stage = reduce(lambda a, b: a | b, (r["ranks"] for r in mine))
        same = reduce(lambda a, b: a | b, (r["ranks"] for r in mine if r["tiers"] == role["tiers"]))
        line = reduce(lambda a, b: a | b, (r["ranks"] for r in mine if r["tiers"] == role["tiers"]
                                           and r.get("timeline") == role.get("timeline")
                                           and r["peak"] == role["peak"]))
        head = f"pipeline stage{'s' if len(k) > 1 else ''} {', '.join(map(str, k))}"

        def titled(rs) -> str:
            return f"{head}: {_ranks_title(rs)}" if rs == stage else \
                f"{head} ({_ranks_title(stage)}): {_ranks_title(rs)}"
        out[k] = (titled(same), titled(line), None if line == same else _ranks_title(line))
    return out


def movement_time_note(section: dict[str, Any]) -> str | None:
    """Why the movement table's time column reads "?" for some of rank 0's movements (:func:`movement_lines`' first
    role), said once: no --hardware, or which links' bandwidths the --hardware spec lacks; None when every movement
    is timed. The text table and the HTML report's movement section print it."""
    role = section["ranks"][0] if section.get("ranks") else {"movements": []}
    untimed = sorted({m["link"] for m in role["movements"] if m["seconds"] is None})
    if not untimed:
        return None
    return ("no --hardware, so no link bandwidths; give --hardware (a preset such as dgx-h100, or a spec file) to "
            "time the copies" if not section.get("hardware") else
            f"the --hardware spec gives no bandwidth for {', '.join(LINK_BANDWIDTH_WORDS.get(k, k) for k in untimed)}")


def movement_lines(section: dict[str, Any], units: str = DEFAULT_UNITS, cols: int | None = None) -> list[str]:
    """Text lines for :func:`movement_section`: a table of rank 0's movements per step (bytes in
    ``units``; aligned columns, or ``label: value`` records when they do not fit ``cols``:
    :func:`advisor.render.style.columns`), then one endurance line per storage tier."""
    from advisor.render.style import columns
    U = unit_name(units)
    role = section["ranks"][0] if section["ranks"] else {"ranks": [0], "movements": []}
    who = f"rank {role['ranks'][0]}" + (f" (and {len(role['ranks']) - 1} more alike)" if len(role["ranks"]) > 1 else "")
    head = ("link", "direction", "class", "item", U, "time", "overlap")
    # an item moved in more than one pass (ZeRO-3's forward and backward fetches) names its pass
    count: dict[tuple, int] = {}
    for m in role["movements"]:
        count[(m["link"], m["direction"], m["item"])] = count.get((m["link"], m["direction"], m["item"]), 0) + 1
    from advisor.ledger.movement import CROSSING_WORDS, link_label
    rows = [(link_label(m), m["direction"], m["cls"],
             m["item"] + (f" ({m['phase']})" if count[(m["link"], m["direction"], m["item"])] > 1 else ""),
             size(m["bytes"], units, suffix=False),
             f"{m['seconds']:.3f} s" if m["seconds"] is not None else "?", "yes" if m["overlap"] else "no")
            for m in role["movements"]]
    out = [f"Data movement per optimizer step ({who}; {unit_note(units)}):"]
    # text left, numbers right; indented 2 under the title
    out += ["  " + x for x in columns([head, *rows], (False, False, False, False, True, True, False),
                                      None if cols is None else cols - 2)]
    if not role["movements"]:
        out.append("  (nothing crosses PCIe, NVMe or the network)")
    crossed = {m.get("crosses") for m in role["movements"]} - {None}
    if crossed:  # the collectives' link named once: "network" alone read as InfiniBand on one node
        rpn = section.get("ranks_per_node")
        out.append("  (collectives" + (f", {rpn} ranks per node" if rpn else "") + ": " + "; ".join(f"{link_label({'link': 'network', 'crosses': c})} = "
                                                  f"{CROSSING_WORDS[c]}" for c in sorted(crossed, reverse=True)) + ")")
    note = movement_time_note(section)
    if note:  # said once, not per row: a "?" with no reason reads as a fault
        out.append(f"  (time ?: {note})")
    return out + endurance_lines(section, units)


def endurance_lines(section: dict[str, Any], units: str = DEFAULT_UNITS) -> list[str]:
    """One line per storage tier of estimate's movement section (``section["endurance"]``,
    :func:`advisor.views.estimate.movement_section`): bytes written per step per node, per day at the
    step time, the share of the drive's rated write endurance used per day and its projected life.
    Sizes in ``units``. The text report (:func:`movement_lines`) and the HTML report both print these
    lines, from the same section: no figure is computed here."""
    out: list[str] = []
    for ln in section.get("endurance") or []:
        if not ln["write_bytes_per_step"] and not ln["paths"]:
            continue  # a tier nothing is offloaded to: no line
        name = ln["tier"] or ", ".join(ln["paths"]) or "?"
        s = f"Storage {name}" + (f" [{ln['access']}]" if ln["access"] else " (no tier in the hardware spec)")
        s += f": {size(ln['write_bytes_per_step'], units)} written per step per node"
        if ln["write_bytes_per_day"] is not None:
            pd = ln["write_bytes_per_day"]
            s += f", {size(pd, units, prefix='T' if pd >= 1e12 else 'G' if pd >= 1e9 else 'M')}/day"
            if (ln.get("writing_nodes") or 1) > 1:
                s += f" by the {ln['writing_nodes']} nodes together (shared tier)"
            if ln.get("checkpoint_bytes_per_day") is not None:  # saves to the same tier (views/estimate.share_save_tier)
                s += (f" (the swap's {size(ln['swap_bytes_per_day'], units, prefix='T', digits=3)} + "
                      f"{size(ln['checkpoint_bytes_per_day'], units, prefix='T', digits=3)} of checkpoint saves to "
                      f"{ln['checkpoint_save_dir']} on the same tier)")
            s += " at "
            if ln.get("requested_step_time_s") is not None:
                s += (f"{ln['step_time_s']:,.1f} s/step, the step time its NVMe traffic implies (a step time of "
                      f"{ln['requested_step_time_s']:g} s is shorter than the {ln['write_seconds_per_step'] or 0:,.1f} s "
                      f"writing + {ln['read_seconds_per_step'] or 0:,.1f} s reading one step takes at the tier's rated "
                      "bandwidths)")
            else:
                s += f"{ln['step_time_s']:g} s/step" + {"--step-time": " (--step-time, measured)",
                                                        "model": " (the step-time model's)"}.get(
                    section.get("step_time_source") or "", "")
            if ln["endurance_used_per_day"] is not None:
                s += f", {100 * ln['endurance_used_per_day']:.3g}% of the drive's whole rated write endurance per day"
            if ln["days_of_life"] is not None:
                s += f", projected life {ln['days_of_life']:,.1f} days"
            elif ln["write_bytes_per_step"] == 0:
                s += ", no wear"
        else:
            s += " (give a step time for per-day figures)"
        out.append(s)
    return out


def step_time_lines(stt: dict, given_step_time_s: float | None = None, units: str = DEFAULT_UNITS) -> list[str]:
    """The step-time section's text lines from estimate's ``step_time`` section (its stored
    ``lines``, :func:`advisor.ledger.steptime.breakdown_lines`), the lines naming sizes redrawn in
    ``units`` (GiB or GB); and, when ``--step-time`` (``given_step_time_s``, the movement
    section's) sets the per-day figures, a line saying so. The text report and the HTML report
    both print these."""
    from advisor.ledger import steptime as _stm
    cpu = next((t for t in stt.get("terms") or [] if t.get("name") == "cpu_optimizer"), None)
    gpu = next((t for t in stt.get("terms") or [] if t.get("name") == "gpu_optimizer"), None)
    so = (stt.get("assumptions") or {}).get("super_offload")
    out = []
    for line in stt.get("lines") or [f"step time: not modelled ({stt.get('why')})"]:
        if cpu is not None and line.startswith("  CPU optimizer:"):  # stored in GiB: in ``units`` here
            line = _stm.cpu_optimizer_line(cpu["amount"], cpu.get("rate"), units,
                                           (stt.get("assumptions") or {}).get("cpu_optimizer_threads"),
                                           next((t for t in stt.get("terms") or []
                                                 if t.get("name") == "cpu_optimizer_async"), None))
        elif gpu is not None and line.startswith(_stm.GPU_OPTIMIZER_LINE_PREFIX):  # likewise
            line = _stm.gpu_optimizer_line(gpu, units)
        elif so and line.startswith(_stm.SUPER_OFFLOAD_LINE_PREFIXES):  # likewise (its first line has the rate)
            line = _stm.super_offload_lines(so, units)[0]
        elif line.startswith(_stm.BANDWIDTH_LINE_PREFIX):  # likewise
            line = _stm.collective_bandwidth_line(stt.get("terms") or [], units) or line
        out.append(line)
    if stt.get("per_day_figures_use") == "--step-time" and given_step_time_s is not None:
        out.append(f"  per-day NVMe figures and drive life below use --step-time {given_step_time_s:g} s (measured), "
                   f"not the model's {stt.get('step_time_s') or 0:,.2f} s")
    return out


#: Visible devices (``CUDA_VISIBLE_DEVICES`` ...) listed by name in the text report; more are counted.
MAX_DEVICES_SHOWN = 16


def _devices_text(devices: list[str]) -> str:
    """The environment's visible-device list as echoed: each entry cut (``errors.cut``), at most
    :data:`MAX_DEVICES_SHOWN` of them, then how many there are. The list is the user's text, any
    length (a 5,000-character entry was printed whole; issue 21, fuzz round c)."""
    from advisor.errors import cut
    shown = ",".join(cut(d) for d in devices[:MAX_DEVICES_SHOWN])
    return shown + (f",... ({len(devices):,} devices)" if len(devices) > MAX_DEVICES_SHOWN else "")


def step_time_workload_text(wl: dict[str, dict]) -> str:
    """One line: the workload a model step time was computed on
    (:func:`advisor.views.estimate.step_time_workload`), each value with where it came from."""
    parts = []
    for k, d in wl.items():
        v = d.get("value")
        shown = f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)
        parts.append(f"{k} {shown} ({d.get('origin')})")
    return "step time's workload (as estimate reads it): " + ", ".join(parts)


def _fmt_s(s: float | None) -> str:
    return duration_text(s)


def world_default_words(source: str | None) -> str:
    """" (the default: ...)" after a world size nothing gave (``advisor.cluster.launch.job_shape``'s
    source "default 1": no --world-size, launcher environment, accelerate launch or --hardware), so
    a report never models one rank silently; " (from NAME.workload.json, ...)" for the world shape a
    workload sidecar recorded (job_shape's source "NAME.workload.json, the world generate planned"); "" for a
    world size some input of this run gave."""
    if source and source.endswith(", the world generate planned"):
        return f" (from {source})"
    if not source or not source.startswith("default"):
        return ""
    return (" (the default: no --world-size, WORLD_SIZE / SLURM_NTASKS, nodes x ranks per node, accelerate launch "
            "or --hardware gave one; README lists the order)")


def save_dir_lines(st: dict[str, Any] | None, units: str = DEFAULT_UNITS) -> list[str]:
    """The save dir's tier lines of a checkpoint plan's ``storage()`` dict (``CheckpointPlan.storage``): the tier,
    its rates and the bytes written per save, then saves and bytes per day and the drive's wear; [] when no tier
    holds the save dir (the checkpoint report's notes say why; estimate says it in :func:`estimate_save_dir_lines`).
    One writer for the checkpoint command and estimate, so both print the same figures."""
    def _size(n: int) -> str:
        return f"{n:,} B" if n < 10**6 else size(n, units)

    lines: list[str] = []
    if not st or not st["tier"]:
        return lines
    lines.append(f"  save_dir {st['save_dir']} on tier '{st['tier']}' [{st['access']}] ({', '.join(st['mounts'])}; "
                 f"write {rate(st['write_bytes_per_s'], units)}, read {rate(st['read_bytes_per_s'], units)}; "
                 f"endurance {st['endurance'] or 'unknown'}): {_size(st['bytes_written_per_save'])} written per save "
                 f"{'on the busiest node' if st.get('written_by', 'the busiest node') == 'the busiest node' else 'by ' + st['written_by']}")
    if st["bytes_written_per_day"] is not None:
        s = (f"    one save every {_fmt_s(st['save_interval_s'])} ({st['interval_source']}): "
             f"{st['saves_per_day']:,.2f} saves/day, {size(st['bytes_written_per_day'], units, prefix='T', digits=3)} "
             "written per day")
        if st.get("swap_bytes_per_day") is not None:  # the NVMe swap on the same tier (views/estimate.share_save_tier)
            s += (f" ({size(st['checkpoint_bytes_per_day'], units, prefix='T', digits=3)} of saves + "
                  f"{size(st['swap_bytes_per_day'], units, prefix='T', digits=3)} of the {st['shares_tier_with']}, "
                  "which writes to the same tier)")
        if st["endurance_used_per_day"] is not None:
            s += (f", {100 * st['endurance_used_per_day']:.3g}% of the drive's rated endurance per day, "
                  f"projected life " + (f"{st['days_of_life']:,.0f} days" if st["days_of_life"] is not None
                                        else "unlimited"))
            if st["warranty_days"]:
                s += f" (warranty {st['warranty_days']:,.0f} days)"
        else:
            s += " (endurance unknown)"
        lines.append(s)
    else:
        lines.append("    give --node-mtbf-hours (Young/Daly interval) or --save-interval for writes per day")
    return lines


def estimate_save_dir_lines(st: dict[str, Any] | None, hardware_given: bool, units: str = DEFAULT_UNITS) -> list[str]:
    """estimate's lines about ``--save-dir`` (``st``: its checkpoint section's ``storage``, None without a save
    dir): the tier's wear (:func:`save_dir_lines`), or one note saying why it is not counted -- no ``--hardware``
    (no storage tiers known) or no tier of the hardware spec holding the path (a relative path never matches a
    tier's absolute mounts: ``Hardware.tier_for_path``)."""
    if not st:
        return []
    if st["tier"]:
        return save_dir_lines(st, units)
    if not hardware_given:
        why = "no --hardware, so no storage tier is known"
    else:
        why = "no storage tier of the --hardware spec holds it" + (
            "" if str(st["save_dir"]).startswith("/") else " (give an absolute path)")
    return [f"  note: save_dir {st['save_dir']}: its tier's wear is not counted: {why}"]


def checkpoint_text(plan: CheckpointPlan, units: str = DEFAULT_UNITS, color: bool = False) -> str:
    """Human-readable report (sizes in ``units``); files that differ only in the rank are folded
    into one row."""
    import re

    from advisor.render.lint import location_prefix

    def _size(n: int) -> str:
        return f"{n:,} B" if n < 10**6 else size(n, units)

    f = plan.files
    lines = [f"Checkpoint: engine.save_checkpoint (DeepSpeed 0.19.8), ZeRO-{plan.zero_stage}, {f.wrapper} + "
             f"{f.basic_optimizer}, world size {plan.world_size}{world_default_words(plan.world_size_source)} "
             f"(data-parallel {plan.dp_world_size})"]
    if f.unsupported:
        lines.append("  not saved: DeepSpeed would refuse this config before training starts; fix the error finding(s) "
                     "below first" if plan.findings else f"  not saved: {f.unsupported}")
        for x in plan.findings:  # the refusing findings (advisor.views.checkpoint)
            msg, fix = x.text(units)
            # file:line:column, or the --set that wrote the key, as estimate, check and lint print it
            lines.append(f"  {location_prefix(x)}{paint(x.severity, color)} {x.code}: {msg}")
            if fix:
                lines.append(f"    fix: {fix}")
        return "\n".join(lines)
    rows: dict[tuple, list] = {}
    for x in f.files:
        pat = re.sub(r"zero_pp_rank_\d+", "zero_pp_rank_{r}", x.path)
        pat = re.sub(r"/rank\d+/", "/rank{r:02d}/", pat)
        # MoE: one layer_{l}_expert_{e} file per MoE layer and expert (checkpoint._moe_zero12_files)
        pat = re.sub(r"/layer_\d+_expert_\d+_", "/layer_{l}_expert_{e}_", pat)
        key = (pat if pat != x.path else x.path, x.bytes)
        rows.setdefault(key, []).append(x)
    # one unit for the column, named in its header, as the state table's: GiB (GB) at two decimals;
    # a file of a few bytes shows "<0.01", not "0.00"
    head = f"tensor {unit_name(units)}"

    def _cell(n: int) -> str:
        shown = size(n, units, suffix=False)
        return "<0.01" if n and float(shown.replace(",", "")) == 0 else shown

    table = [("file (under save_dir)", "written by", head)]
    for (pat, nbytes), xs in rows.items():
        n = sum(x.count for x in xs)
        ranks = sorted({x.rank for x in xs})
        who = (f"rank {xs[0].rank}" if n == 1 else f"{n} ranks, each" if len(ranks) == n
               else f"{len(ranks)} ranks, {n / len(ranks):g} each")
        table.append((xs[0].path if len(xs) == 1 else pat, who, _cell(nbytes)))
    from advisor.render.style import columns
    lines += ["  " + x for x in columns(table, (False, False, True), width(sys.stdout) - 2)]
    lines.append(f"  per save: {_size(plan.per_save_bytes)}; kept x{plan.keep}: {_size(plan.kept_bytes)}")
    lines.append(f"  (sizes are tensor payload; .pt files add pickle overhead of a few KB each)")
    s16 = plan.save16
    lines.append(f"  save_16bit_model: " + (f"pytorch_model.bin {_size(s16.bytes)} by rank 0" if s16.writes
                                          else "writes nothing") + f"; {s16.note}")
    if s16.gather_accelerator_bytes:
        lines.append(f"    gather spike: {_size(s16.gather_accelerator_bytes)} accelerator on every rank (largest "
                     f"module), {_size(s16.host_bytes_rank0)} host on rank 0")
    lw = plan.largest_writer()
    if plan.world_size > 1 and lw["share"] > 2.0 / plan.world_size:
        lines.append(f"  rank {lw['rank']} writes {_size(lw['bytes'])} ({lw['share']:.0%} of the save) by itself: "
                     "one client's bandwidth may bound the save time below")
    if plan.write_bandwidth:
        lines.append(f"  write at {rate(plan.write_bandwidth, units)}: {_fmt_s(plan.save_s)}; "
                     f"restart reads {_size(f.read_bytes)} at {rate(plan.read_bandwidth or 0, units)}: "
                     f"{_fmt_s(plan.load_s)}")
    res = plan.resilience()
    if res:
        lf = res["lost_fraction"]
        rc = res["recovery_s"]
        lines.append(f"  cluster MTBF {_fmt_s(res['cluster_mtbf_s'])} (node MTBF "
                     f"{(plan.node_mtbf_s or 0) / 3600:,.0f} h / {plan.nodes} node{'s' if plan.nodes != 1 else ''})")
        lines.append(f"  save every {_fmt_s(res['interval_s'])}" +
                     (f" (~{res['interval_steps']:,} step{'s' if res['interval_steps'] != 1 else ''}"
                      + (f" at the step-time model's {plan.step_time_s:,.2f} s per step"
                         if plan.step_time_source == "model" else "") + ")"
                      if "interval_steps" in res else "") +
                     "  [Young/Daly: sqrt(2 x save time x MTBF)]")
        if plan.step_time_source == "model" and plan.step_time_workload:
            lines.append("    " + step_time_workload_text(plan.step_time_workload))
        lines.append(f"  time lost: {lf['total']:.2%} (saving {lf['saving']:.2%}, rework {lf['rework']:.2%}, "
                     f"restart {lf['restart']:.2%})")
        lines.append(f"  one failure costs {_fmt_s(rc['expected_total'])} expected (restart {_fmt_s(rc['restart'])} "
                     f"+ reload {_fmt_s(rc['reload'])} + lost work {_fmt_s(rc['lost_work_expected'])}), "
                     f"{_fmt_s(rc['worst_total'])} worst")
    elif plan.write_bandwidth is None:
        lines.append("  give --write-bandwidth (and --node-mtbf-hours) for save time and the save interval")
    lines += save_dir_lines(plan.storage(), units)
    for x in plan.findings:
        msg, fix = x.text(units)
        lines.append(f"  {location_prefix(x)}{paint(x.severity, color)} {x.code}: {msg}")
        if fix:
            lines.append(f"    fix: {fix}")
    for n in f.notes[1:]:
        lines.append(f"  note: {n}")
    for i, n in enumerate(plan.notes):
        sized = plan.notes_sized.get(i)  # a note naming sizes: in ``units``
        lines.append(f"  note: {render_sized(*sized, units) if sized else n}")
    return "\n".join(lines + release_lines())


def _val(f: Found | None) -> str:
    return "unknown" if f is None else f"{f.value:<6} from {f.source}"


def check_text(r: CheckResult, units: str = DEFAULT_UNITS, color: bool = False) -> str:
    """The human report (sizes in ``units``): launch shape and resources with their sources, the
    verdict per tier, findings, warnings, and a last line ``GO`` / ``NO-GO`` with the exit code."""

    def gb(n: int | float) -> str:
        return size(n, units)

    count = "" if f"{r.parameters:,}" in str(r.model) else f" ({r.parameters:,} parameters)"  # said once
    L: list[str] = [f"ds-advisor check: {r.source}, model {r.model}{count}", "launch shape"]
    ls = r.launch
    L.append(f"  world size       {_val(ls.world_size)}")
    L.append(f"  ranks per node   {_val(ls.gpus_per_node)}")
    L.append(f"  nodes            {_val(ls.num_nodes)}")
    L.append(f"  this node        {_val(ls.node_rank) if ls.node_rank else '0      (default)'}  "
             f"{_ranks_title(ls.node_ranks())}")
    if ls.rank is not None:
        L.append(f"  this rank        {_val(ls.rank)}")
    if ls.visible_devices is not None:
        L.append(f"  visible devices  {_devices_text(ls.visible_devices)} from {ls.visible_source}")
    L.append("this node")
    a = r.accelerators
    if a.ok:
        names = sorted({d.name for d in a.devices})
        L.append(f"  accelerators     {len(a.devices)} x {' / '.join(names)} from {a.source}")
        groups: dict[tuple[int, int], list[str]] = {}
        for d in a.devices:
            groups.setdefault((d.total, d.used), []).append(d.index)
        for (total, used), idx in groups.items():
            L.append(f"    GPU {','.join(idx)}: {gb(total)} total, {gb(used)} used, {gb(max(0, total - used))} free"
                     + (" each" if len(idx) > 1 else ""))
    else:
        L.append(f"  accelerators     not probed: {a.error}")
    h = r.host
    if h.available is not None:
        L.append(f"  host memory      {gb(h.available)} available of {gb(h.total or 0)} from {h.source}")
    else:
        L.append(f"  host memory      not probed: {h.error}")
    for p in r.nvme:
        state = ("missing" if not p.exists else "not a directory" if not p.is_dir else
                 "writable" if p.writable else f"NOT writable ({p.write_error})")
        free = "" if p.free is None else f", {gb(p.free)} free ({p.free_source})"
        L.append(f"  nvme_path        {p.path} ({'+'.join(p.roles)}): {state}{free}; swap files {gb(p.need)}")
    if r.libaio is not None:
        L.append(f"  libaio           {'found' if r.libaio.found else 'MISSING'}: {r.libaio.detail}")
    L.append("verdict per tier")
    if not r.tiers:
        from advisor.rules import refusals
        if refusals(r.findings):
            L.append("  none: DeepSpeed would refuse this config before training starts (the error finding(s) below)")
    for t in r.tiers:
        cap = "unknown" if t.capacity is None else gb(t.capacity)
        head = "" if t.headroom is None else f", headroom {gb(t.headroom)}"
        L.append(f"  {paint(t.verdict.upper(), color)}{' ' * (7 - len(t.verdict))} {t.tier} [{t.scope}]: "
                 f"need {'>= ' if t.lower_bound else ''}{gb(t.need)} of {cap}{head}"
                 + (f"  [capacity from {t.capacity_source}]" if t.capacity_source else ""))
        fr = t.fit
        if fr is not None and fr.overhead:  # the runtime overhead rows inside that need
            L.append(f"          tracked peak {'>= ' if t.lower_bound else ''}{gb(fr.tracked or 0)}, plus runtime "
                     "overhead per rank:")
            for o in fr.overhead:
                band = "" if o.low == o.high else f" (band {gb(o.low)}-{gb(o.high)})"
                L.append(f"          + {o.name} {gb(o.bytes)}{band}: {o.formula} [{o.source}]")
            if t.verdict == "tight" and t.lower_bound:
                L.append("          tight: the tracked peak is a lower bound (M104 says what it leaves out)")
            if t.verdict == "tight" and fr.overhead_tight:
                L.append(f"          tight: headroom {gb(t.headroom or 0)} < {gb(fr.uncertainty)} the overhead may "
                         f"exceed its defaults by ({', '.join(fr.uncertain)})")
    m104 = [f.text(units)[0] for f in r.findings if f.code == "M104"]
    for x in r.excluded:
        L.append(f"  not counted: {excluded_words(x, m104)}")
    if r.findings:
        L.append("findings")
        from advisor.render.lint import hf_hint_lines, location_prefix
        hint, folded = hf_hint_lines(r.findings, "check", r.source)  # "auto" as lint folds it
        for msg, fix in hint:
            L.append(f"  {paint('error', color)} A001 /: {msg}")
            L.append(f"      fix: {fix}")
        for f in r.findings:
            if id(f) in folded:
                continue
            loc = location_prefix(f)  # file:line:column, as lint prints it
            msg, fix = f.text(units)
            L.append(f"  {loc}{paint(f.severity, color)} {f.code} {f.shown_pointer}: {msg}")
            if fix:
                L.append(f"      fix: {fix}")
    for i, w in enumerate(r.warnings):
        t = r.warning_sizes.get(i)  # a warning naming sizes: in ``units`` too
        L.append(f"{paint('warning', color)}: {render_sized(t[0], t[1], units) if t else w}")
    L += release_lines()  # before the verdict, which stays the last line
    if r.exit_code == EXIT_PROBE:
        L.append(f"{paint('NO-GO', color)}: the environment could not be probed (--strict) (exit {r.exit_code})")
    else:
        why = "" if r.verdict != "tight" or not any(t.lower_bound for t in r.tiers) else \
            ": the accelerator need is a lower bound (M104), not a fit"
        L.append(f"{paint(r.verdict.upper(), color)}{why} (exit {r.exit_code})")
    return "\n".join(L)


def check_json(r: CheckResult) -> str:
    """``--format json``: :meth:`CheckResult.to_dict` as indented JSON."""
    return json.dumps(r.to_dict(), indent=2)


def estimate_json(result: Any) -> str:
    """``estimate --format json``: :meth:`EstimateResult.to_dict` as indented JSON
    (``schemas/estimate-output.schema.json``)."""
    return json.dumps(result.to_dict(), indent=2)


def checkpoint_json(plan: CheckpointPlan) -> str:
    """``checkpoint --format json``: :meth:`CheckpointPlan.to_dict` as indented JSON, with the
    ``deepspeed_release`` the command checked against (:func:`advisor.config.versions.release_dict`)."""
    from advisor.config.versions import current_release, release_dict
    return json.dumps({**plan.to_dict(), "deepspeed_release": release_dict(current_release())}, indent=2)


def generate_text(res: Any, top: int = 5, units: str = DEFAULT_UNITS, stream: IO[str] | None = None) -> str:
    """``generate``'s table of the top plans (:func:`advisor.views.generate.table_text`), sizes in
    ``units``, laid out for ``stream`` (default stderr, where generate prints it beside the config)."""
    from advisor.views.generate import table_text

    return table_text(res, top, units, cols=width(stream or sys.stderr))


def generate_json(res: Any, top: int = 5) -> str:
    """``generate --format json``: :func:`advisor.views.generate.result_json` as indented JSON, with
    the ``deepspeed_release`` the plans were made for."""
    from advisor.views.generate import result_json

    from advisor.config.versions import current_release, release_dict
    return json.dumps({**result_json(res, top), "deepspeed_release": release_dict(current_release())}, indent=2)


def models_json(rows: list[tuple[str, int, str, str]]) -> str:
    """``models --format json``: one object per preset (name, exact parameter count, family, description)."""
    return json.dumps([{"name": r[0], "parameters": r[1], "family": r[2], "description": r[3]} for r in rows],
                      indent=2)


def models_text(rows: list[tuple[str, int, str, str]]) -> str:
    """``models``: a header row, then one line per preset (name, parameters, model type, description)."""
    from advisor.render.style import columns
    head = [("preset", "parameters", "model type", "description")]
    return "\n".join(columns(head + [(name, f"{n:,}", fam, desc) for name, n, fam, desc in rows], (False, True),
                             width(sys.stdout)))


def model_types_json(rows: list[dict[str, Any]]) -> str:
    """``models --types --format json``: per built-in model type, activation formula yes/no and a note."""
    return json.dumps(rows, indent=2)


def model_types_text(rows: list[dict[str, Any]]) -> str:
    """``models --types``: one line per built-in model type, then what to do for any other."""
    from advisor.render.style import columns
    out = columns([("model_type", "parameters", "activation formula", "note")]
                  + [(r["model_type"], "yes", "yes" if r["activation_formula"] else "no", r["note"]) for r in rows],
                  cols=width(sys.stdout))
    out.append("any other model_type transformers builds: --activations trace (parameters and activations from "
               "transformers' model on fake tensors; the trace extra), or --params N (model states only)")
    return "\n".join(out)


def hardware_json(hws: list[Any], one: bool = False) -> str:
    """``hardware --format json``: the list of presets, or (``one``) the single spec asked for,
    each as a hardware spec (:func:`advisor.cluster.hardware.to_spec`): saved to a file, it is
    a valid ``--hardware FILE`` for the same hardware."""
    from advisor.cluster.hardware import to_spec

    return json.dumps(to_spec(hws[0]) if one else [to_spec(h) for h in hws], indent=2)



def _request_latency(t: Any) -> str:
    """A storage tier's request latencies as the aio model uses them (advisor.ledger.movement
    .nvme_rate): the tier's, else the assumed NVME_LATENCY_S; and the aio settings its figures were
    measured at, if stated."""
    from advisor.ledger.movement import NVME_LATENCY_S
    r, w = t.read_latency_s, t.write_latency_s
    words = (f"requests start in {(r or NVME_LATENCY_S['read']) * 1e6:,.0f} us reading, "
             f"{(w or NVME_LATENCY_S['write']) * 1e6:,.0f} us writing"
             + ("" if r and w else " (assumed: a data-centre NVMe drive's random access)"))
    if t.aio:
        words += "; figures measured at aio " + ", ".join(f"{k} {v}" for k, v in t.aio)
    return words

def hardware_text(hws: list[Any], one: bool = False, units: str = "GiB") -> str:
    """``hardware``: a table with one row per preset (labelled columns, sizes in ``units``: GiB =
    2^30 or GB = 1e9 bytes), or (``one``) every field of one spec, every size and bandwidth
    (per direction) in ``units`` too (TiB/TB for the larger ones)."""
    from advisor.units import rate, size, unit_name, unit_note

    G = unit_name(units)
    L: list[str] = []
    if not one:
        head = ("preset", "GPUs", "accelerator", f"memory {G}", f"host {G}", "storage (tier:mount)")
        rows = []
        for h in hws:
            a = h.accelerator
            rows.append((h.name, str(h.accelerators_per_node), a.name if a else "-",
                         size(a.memory_bytes, units, suffix=False, digits=1) if a else "-",
                         size(h.host_memory_bytes, units, suffix=False, digits=0) if h.host_memory_bytes else "?",
                         ", ".join(f"{t.name}:{t.mounts[0]}" for t in h.storage) or "?"))
        from advisor.render.style import columns
        L += columns([head, *rows], (False, True, False, True, True, False), width(sys.stdout))
        L.append(f"\nMemory per accelerator and host memory per node, in {unit_note(units)}. Give a name (or a JSON "
                 "spec file, schemas/hardware.schema.json) for details; NAME:N or FILE:N for N nodes.")
        return "\n".join(L)
    h = hws[0]
    a = h.accelerator
    L.append(f"{h.name}: {h.description or h.summary(units)}")
    L.append(f"  nodes {h.nodes} x {h.accelerators_per_node} accelerators (sizes in {unit_note(units)})")
    if a:
        flops = f"{a.peak_bf16_flops / 1e12:,.1f} TFLOP/s bf16 dense" if a.peak_bf16_flops else "FLOP/s ?"
        bw = size(a.memory_bandwidth_bytes_per_s, units, prefix="T") + "/s" if a.memory_bandwidth_bytes_per_s else "?"
        L.append(f"  accelerator {a.name}: {size(a.memory_bytes, units)}, {bw} memory bandwidth, {flops}")
    if h.host_link_bytes_per_s:
        L.append(f"  host link {h.host_link_name or ''} {rate(h.host_link_bytes_per_s, units)} per direction")
    if h.peer_bytes_per_s:
        L.append(f"  accelerator peer link {rate(h.peer_bytes_per_s, units)} per direction")
    L.append(f"  host memory {size(h.host_memory_bytes, units)} per node" if h.host_memory_bytes
             else "  host memory unknown")
    if h.network_bytes_per_s is not None:
        L.append(f"  network {rate(h.network_bytes_per_s, units)} per node per direction")
    for t in h.storage:
        rated = f", rated {size(t.rated_write_bytes, units, prefix='T', digits=0)} written ({t.endurance.describe()})" \
            if t.rated_write_bytes else ", endurance unknown"
        L.append(f"  storage {t.name} [{t.access}] at {', '.join(t.mounts)}: {size(t.capacity_bytes, units, prefix='T')}, "
                 f"read {rate(t.read_bytes_per_s, units)}, write {rate(t.write_bytes_per_s, units)}{rated}; "
                 + _request_latency(t))
    if h.source:
        L.append(f"  source: {h.source}")
    return "\n".join(L)


def measure_json(m: dict[str, Any]) -> str:
    """``measure --format json``: config, model, world size, steps, the rows and whether all match."""
    return json.dumps(m, indent=2)


def _measure_phases_text(ph: dict[str, Any] | None) -> list[str]:
    """The phase part of ``measure``: per rank and tracker phase the engine's high-water mark
    beside the ledger timeline's instant (bytes), the peak instants, the unattributed storages."""
    from advisor.render.style import columns
    if not ph:
        return []
    L = ["", "phase high-water marks (every storage the engine allocated) vs the ledger timeline:"]
    if not ph["compared"]:
        return L + [f"  not compared: {ph['reason']}"]
    for r in ph["rows"]:
        if "error" in r:
            L.append(f"  rank {r['rank']}: error: {r['error']}")
    ok = [r for r in ph["rows"] if "phase" in r]
    L += ["  " + x for x in columns([("rank", "phase", "measured B", "ledger B", "diff", "ledger instant", "")]
                                    + [(str(r["rank"]), r["phase"], f"{r['measured']:,}", f"{r['ledger']:,}",
                                        f"{100 * r['rel_diff']:+.2f}%", r["ledger_instant"],
                                        "" if r["ok"] else "OVER 1%") for r in ok],
                                    (True, False, True, True, True, False, False), gap=1)]
    for p in ph["peak_instant"]:
        L.append(f"  rank {p['rank']} peak: engine in {p['engine'] or '?'}, ledger in {p['ledger'] or '?'}")
    for r in ok:
        for u in r["unattributed"]:
            L.append(f"  unattributed rank {r['rank']} {r['phase']}: {u['bytes']:,} B at {u['site']}")
    for r in ok:  # unclaimed by a census, but a live ledger entry cites the site (measure.split_unclaimed)
        for u in r.get("in_ledger", ()):
            L.append(f"  in the ledger, rank {r['rank']} {r['phase']}: {u['bytes']:,} B at {u['site']} "
                     f"({', '.join(u['items'])}: {u['ledger_bytes']:,} B)")
    if ph.get("tier_note"):
        L.append(f"  note: {ph['tier_note']}")
    if ph.get("ga_note"):
        L.append(f"  note: {ph['ga_note']}")
    n_bad = sum(1 for r in ph["rows"] if not r.get("ok", False))
    L.append(f"  {len(ph['rows']) - n_bad} of {len(ph['rows'])} phases within 1%")
    return L


def measure_text(m: dict[str, Any]) -> str:
    """``measure``: one row per (rank, snapshot, item, tier): measured bytes, the ledger's, the difference."""
    from advisor.render.style import columns
    rows = m["rows"]
    L: list[str] = []
    # one block per (rank, snapshot): the item rows fit a piped line (no rank/snapshot columns)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["rank"], r.get("snapshot")), []).append(r)
    for (rank, snap), rs in groups.items():
        L.append(f"rank {rank}" + (f", snapshot {snap}" if snap else "") + ":")
        L += ["  error: " + r["error"] for r in rs if "error" in r]
        ok = [r for r in rs if "error" not in r]
        if ok:
            L += ["  " + x for x in columns([("item", "tier", "measured B", "ledger B", "diff B")]
                                           + [(r["item"], r["tier"], f"{r['measured']:,}", f"{r['ledger']:,}",
                                               f"{r['diff']:,}") for r in ok], (False, False, True, True, True),
                                           gap=1)]
    bad = sum(1 for r in rows if "error" in r or r["diff"] != 0)
    L.append(f"{len(rows) - bad} of {len(rows)} rows match to the byte")
    L += _measure_phases_text(m.get("phases"))
    if "matches" in m:  # the verdict (engine.measure.measure_verdict): both parts, or what failed
        failed = [what for what, key in (("census", "census_matches"), ("phases", "phases_match"))
                  if not m.get(key, True)]
        L.append("verdict: matches (census to the byte, phases within 1%)" if m["matches"] else
                 f"verdict: does not match ({' and '.join(failed) or 'see above'})")
    rel = m.get("deepspeed_release")
    if rel:
        L.append(f"release: the engine is the installed DeepSpeed {rel['requested']}; the ledger is DeepSpeed "
                 f"{DEEPSPEED_VERSION}'s accounting and defaults")
    return "\n".join(L)
