"""``ds-advisor report``: one self-contained HTML page for an estimate.

The page needs no network: CSS is inline, charts are inline SVG written by matplotlib (SVG
backend, text kept as text, no embedded fonts), and there are no scripts. Sections:

1. **State per tier** — one stacked bar per tier (accelerator, host, nvme), one segment per
   state class, in GiB. The accelerator bar is the worst rank (the role with the highest
   accelerator peak), per rank; the host and NVMe bars are summed over the ranks of one node
   (``gpus_per_node``, default min(world size, 8)), as the estimate's fit rows are. Segments are
   what is live at the tier's peak instant, by class (the fit row's ``classes``, JSON
   ``fit[].classes``, from the timeline), so a bar is the tracked peak (JSON ``fit[].peak``) and never
   stands above its need line; a dotted line marks the fit row's need (the peak, plus the runtime
   overhead on the accelerator) and a dashed red line the tier's capacity when one is known. SVG ids
   (matplotlib ``gid``) are stable: ``tier-bar-<tier>`` (the bar's outline), ``seg-<tier>-<class>``,
   ``tier-total-<tier>`` (the bar's figure), ``need-<tier>``, ``capacity-<tier>``.
2. **Movement per step** — bytes rank 0 moves per optimizer step by link and direction
   (rank 0's rows of estimate's own movement section, :func:`advisor.ledger.movement.movement_section`), one
   stacked bar per link/direction with segments per state class (ids ``move-<link>-<direction>``).
3. **Findings**, 4. **Fit** (the need cell of each tier has ``id=fit-need-<tier>`` and its exact
   bytes in ``data-bytes``; the worst rank's accelerator peak before the runtime overhead is
   ``id=peak-accelerator``, the same number as ``estimate --format json``'s largest
   ``ranks[].peak.accelerator.bytes``), 5. **Assumptions**, 6. **Checkpoint** (from
   ``advisor.ledger.checkpoint`` when that module is present; otherwise a note): tables, the files that
   differ only in the writing rank folded into one row (``zero_pp_rank_0..7_... x 8, N bytes
   each``, placeholders in ``<var>``), the per-save total, save/load seconds and the save
   interval when the plan has them, the 16-bit export, storage, findings and notes.

Values are written as page text, never as Python or JSON reprs: None is a dash or left out.
A config DeepSpeed refuses (M090) gets a note instead of the charts, the fit table and the figures.

matplotlib is imported only here, and only inside the functions that draw.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import io
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from advisor import DEEPSPEED_VERSION, __version__
from advisor.units import duration_text
from advisor.files import write_atomic  # noqa: F401  (re-exported: callers and tests use it from here)
from advisor.units import DEFAULT_UNITS, UNITS, rate, size, unit_name, unit_note
from advisor.ledger.ranks import RankSet
from advisor.ledger.steptime import RESOURCE_NAMES
from advisor.render.text import capacity_wanted, key_words, world_default_words

from advisor.views.estimate import FLATTEN_ONLY

if TYPE_CHECKING:
    from advisor.views.estimate import EstimateResult

TIERS = ("accelerator", "host", "nvme")
GIB = 2 ** 30


def _gib(n: int | float) -> float:
    """Bytes as GiB for a chart or a table cell (:func:`advisor.units.quotient`: bytes past the
    float range, from a config's 400-digit bucket size, are no OverflowError), at most
    :data:`_CHART_MAX` in size, so an axis limit with headroom (x 1.12) stays finite for matplotlib."""
    from advisor.units import quotient
    return max(-_CHART_MAX, min(_CHART_MAX, quotient(n, GIB)))


#: Largest GiB figure a chart draws (10^300 GiB: a config's absurd count, never a real size).
_CHART_MAX = 1e300
#: Segment colours per state class (colour-blind-safe Okabe-Ito palette).
CLASS_COLORS = {
    "parameters": "#0072B2",
    "gradients": "#E69F00",
    "master_weights": "#009E73",
    "optimizer_states": "#CC79A7",
    "activations": "#56B4E9",
    "workspace": "#999999",
}
CLASS_LABELS = {
    "parameters": "16-bit parameters",
    "gradients": "gradients",
    "master_weights": "fp32 master weights",
    "optimizer_states": "optimizer states",
    "activations": "activations",
    "workspace": "workspace / buffers",
}


@dataclass
class TierBar:
    """What one bar of the tier chart shows (bytes)."""

    tier: str
    scope: str
    classes: dict[str, int]
    need: int | None
    capacity: int | None
    #: The peak instant the segments are taken at (the fit row's words), "" when the tier holds nothing.
    at: str = ""

    @property
    def total(self) -> int:
        """Sum of the class segments."""
        return sum(self.classes.values())


def tier_bars(result: "EstimateResult") -> list[TierBar]:
    """The three bars of the tier chart: what is live at each tier's peak instant, by class, as the estimate's
    fit rows give it (:attr:`advisor.views.estimate.FitRow.classes`: the worst rank on the accelerator, one node's
    ranks on host and NVMe, every rank on a shared NVMe tier); a tier without a fit row is an empty bar."""
    from advisor.ledger.state import CLASSES
    fit = {f.tier: f for f in result.fit}
    bars = []
    for tier in TIERS:
        f = fit.get(tier)
        classes = {c: 0 for c in CLASSES} | (dict(f.classes) if f else {})
        if tier == "accelerator":
            worst = next((r for r in result.roles if f is not None and f.tracked
                          and r.peak(FLATTEN_ONLY)["accelerator"]["bytes"] == f.tracked), None)
            r = worst.ranks if worst is not None else []
            scope = ("per rank" if not r else f"per rank (rank {r[0]})" if len(r) == 1
                     else f"per rank (ranks {r[0]}..{r[-1]}, {len(r)} ranks)")
        else:
            scope = f.scope if f is not None else "per node"
        at = f.label if f is not None and sum(classes.values()) else ""
        bars.append(TierBar(tier, scope, classes, f.need if f else None, f.capacity if f else None, at))
    return bars


def _svg_text(fig, tight: bool = False) -> str:
    """The figure as SVG text; ``tight``: the canvas grows to every artist's extent (matplotlib's
    ``bbox_inches="tight"``), so no text can run past the viewBox."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": f"ds-advisor {__version__}"},
                **({"bbox_inches": "tight", "pad_inches": 0.1} if tight else {}))
    text = buf.getvalue()
    text = re.sub(r"<\?xml[^>]*\?>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    return text.strip()


def _figure(width: float, height: float, ncols: int = 1):
    import matplotlib

    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: no embedded glyphs, no fonts
    matplotlib.rcParams["svg.hashsalt"] = "ds-advisor"  # stable clip-path ids
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasSVG(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, axes


def tier_chart_svg(bars: list[TierBar], units: str = DEFAULT_UNITS) -> str:
    """Inline SVG: one stacked bar per tier, segments per class (in ``units``), need and capacity lines."""
    GIB = UNITS[units]
    fig, axes = _figure(10.5, 4.2, len(bars))
    for ax, b in zip(axes, bars):
        bottom = 0.0
        for cls, color in CLASS_COLORS.items():
            v = _gib(b.classes.get(cls, 0))
            if v <= 0:
                continue
            (rect,) = ax.bar([0], [v], bottom=[bottom], width=0.6, color=color, label=CLASS_LABELS[cls])
            rect.set_gid(f"seg-{b.tier}-{cls}")
            bottom += v
        (outline,) = ax.bar([0], [_gib(b.total)], width=0.6, fill=False, edgecolor="#222222", linewidth=1.0)
        outline.set_gid(f"tier-bar-{b.tier}")
        top = _gib(b.total)
        if b.need is not None:
            ln = ax.axhline(_gib(b.need), color="#222222", linestyle=":", linewidth=1.5, label="need (peak)")
            ln.set_gid(f"need-{b.tier}")
            top = max(top, _gib(b.need))
        if b.capacity is not None:
            ln = ax.axhline(_gib(b.capacity), color="#D55E00", linestyle="--", linewidth=1.8, label="capacity")
            ln.set_gid(f"capacity-{b.tier}")
            top = max(top, _gib(b.capacity))
        ax.set_xlim(-0.8, 0.8)
        ax.set_ylim(0, top * 1.12 if top > 0 else 1)
        ax.set_xticks([0])
        ax.set_xticklabels([b.tier])
        ax.set_title(f"{b.tier}\n{b.scope}", fontsize=9)
        ax.set_ylabel(unit_name(units))  # every pane: its own scale, so its own unit
        tx = ax.text(0, _gib(b.total), f"{_gib(b.total):,.2f}", ha="center", va="bottom", fontsize=8)
        tx.set_gid(f"tier-total-{b.tier}")
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="center right", fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.07, right=0.78, top=0.84, bottom=0.1, wspace=0.45)
    return _svg_text(fig)


def movement_chart_svg(movements: list, rank: int = 0, units: str = DEFAULT_UNITS) -> str | None:
    """Inline SVG: bytes ``rank`` moves per optimizer step, one horizontal stacked bar per
    link/direction, segments per state class (in ``units``). None when nothing moves."""
    from advisor.ledger.movement import link_label  # a network row by the link it crosses
    GIB = UNITS[units]
    agg: dict[str, dict[str, int]] = {}
    for m in movements:
        if m.rank != rank or m.bytes <= 0:
            continue
        d = agg.setdefault(f"{link_label(m)}/{m.direction}", {})
        d[m.cls] = d.get(m.cls, 0) + m.bytes
    if not agg:
        return None
    keys = sorted(agg)
    fig, (ax,) = _figure(10.5, 0.6 + 0.5 * len(keys))
    for y, k in enumerate(keys):
        left = 0.0
        for cls, v in sorted(agg[k].items(), key=lambda kv: list(CLASS_COLORS).index(kv[0])
                             if kv[0] in CLASS_COLORS else 99):
            (rect,) = ax.barh([y], [_gib(v)], left=[left], height=0.6, color=CLASS_COLORS.get(cls, "#444444"),
                              label=CLASS_LABELS.get(cls, cls))
            rect.set_gid(f"move-{k.replace('/', '-')}-{cls}")
            left += _gib(v)
        ax.text(left, y, f" {left:,.2f}", va="center", fontsize=8)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(keys)
    ax.set_xlabel(f"{unit_name(units)} per optimizer step, rank {rank}")
    handles: dict[str, Any] = {}
    for h, lab in zip(*ax.get_legend_handles_labels()):
        handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="center right", fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.17, right=0.78, top=0.95, bottom=max(0.1, 0.5 / (0.6 + 0.5 * len(keys))))
    return _svg_text(fig)


def timeline_chart_svg(timeline: list[dict[str, Any]], peaks: dict[str, Any], units: str = DEFAULT_UNITS) -> str | None:
    """Inline SVG: live bytes per tier (GiB) at every instant of the step timeline
    (``estimate --format json``'s ``ranks[].timeline``), one line per tier that holds anything,
    each tier's peak instant marked. None when the timeline is empty."""
    if not timeline:
        return None
    GIB = UNITS[units]
    colors = {"accelerator": "#0072B2", "host": "#E69F00", "nvme": "#009E73"}
    fig, (ax,) = _figure(10.5, 6.0)  # tall enough for the instants' words under the axis
    xs = list(range(len(timeline)))
    for tier, color in colors.items():
        ys = [_gib(row[tier]) for row in timeline]
        if not any(ys):
            continue
        (ln,) = ax.plot(xs, ys, marker="o", markersize=3, color=color, label=tier)
        ln.set_gid(f"timeline-{tier}")
        pk = peaks.get(tier) or {}
        keys = [row["instant"] for row in timeline]
        if pk.get("bytes") and pk.get("instant") in keys:
            i = keys.index(pk["instant"])
            (mk,) = ax.plot([i], [ys[i]], marker="*", markersize=12, color=color)
            mk.set_gid(f"timeline-peak-{tier}")
    ax.set_xticks(xs)
    # the instants in the text's words (row["label"]: "first optimizer step, sub-group 0: update"),
    # not the JSON's keys ("first_step:g0:update"); a long one wrapped to TICK_LINES lines of
    # TICK_CHARS, cut with an ellipsis past them, its whole text in the tick's <title> (tooltip)
    full = [row.get("label") or row["instant"] for row in timeline]
    ticks = ax.set_xticklabels([tick_label_lines(t) for t in full], rotation=60, ha="right",
                               rotation_mode="anchor", fontsize=6, linespacing=1.1)
    for i, t in enumerate(ticks):
        t.set_gid(f"timeline-tick-{i}")
    ax.set_ylabel(f"{unit_name(units)} live")
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.97, bottom=0.35)
    svg = _svg_text(fig, tight=True)  # the canvas reaches every label's end
    for i, t in enumerate(full):
        svg = svg.replace(f'<g id="timeline-tick-{i}">', f'<g id="timeline-tick-{i}">\n<title>{_e(t)}</title>', 1)
    return svg


#: x-tick labels of the timeline chart: at most this many characters a line, this many lines
TICK_CHARS = 34
TICK_LINES = 2


def tick_label_lines(label: str, width: int = TICK_CHARS, lines: int = TICK_LINES) -> str:
    """``label`` wrapped at its words to at most ``lines`` lines of ``width`` characters, the last
    ending in an ellipsis when the label is longer (the chart keeps the whole label in a <title>)."""
    import textwrap

    parts = textwrap.wrap(label, width, break_long_words=True) or [label]
    if len(parts) > lines:
        rest = " ".join(parts[lines - 1:])
        parts = parts[:lines - 1] + [rest[:width - 1].rstrip() + "\u2026"]
    return "\n".join(parts)


# --- optional sections from other modules --------------------------------------------------------

def movement_section(result: "EstimateResult") -> tuple[list | None, str | None]:
    """(movements, note): rank 0's movements per optimizer step from estimate's own movement section
    (``result.sections["movement"]``, :func:`advisor.ledger.movement.movement_section` on the plan and
    activations the estimate used -- the rows the text and JSON outputs print), as objects with the
    attributes :func:`movement_chart_svg` reads; else None and a note why not. Nothing is recomputed here:
    the chart called movement_for on the ledger itself before, without the estimate's activations."""
    from types import SimpleNamespace
    mv = result.sections.get("movement") if result.sections else None
    if not mv or not mv.get("ranks"):
        return None, "No movement section in this estimate: chart skipped."
    # a role's "ranks": a RankSet (estimate keeps rank_sets) or, once listed, the ranks; JSON's rank_ranges
    role = next((r for r in mv["ranks"] if ("ranks" in r and 0 in r["ranks"])
                 or any(lo <= 0 <= hi for lo, hi in r.get("rank_ranges") or [])), None)
    if role is None:
        return [], None
    return [SimpleNamespace(**{"crosses": None, **m, "rank": 0}) for m in role.get("movements") or []], None


_CHECKPOINT_FUNCS = ("checkpoint_for", "checkpoint_report", "estimate_checkpoint", "checkpoint_sizes")


def checkpoint_section(result: "EstimateResult") -> tuple[Any, str | None]:
    """(data, note): the checkpoint estimate from ``advisor.ledger.checkpoint`` when it is present and
    has one of the functions in ``_CHECKPOINT_FUNCS`` taking the plan (or a ``checkpoint``
    section already in the estimate), as a dict; else a note."""
    if "checkpoint" in result.sections:
        return result.sections["checkpoint"], None
    if importlib.util.find_spec("advisor.ledger.checkpoint") is None:
        return None, "Checkpoint sizes (advisor.ledger.checkpoint) are not part of this build: section skipped."
    mod = importlib.import_module("advisor.ledger.checkpoint")
    for name in _CHECKPOINT_FUNCS:
        fn = getattr(mod, name, None)
        if fn is None:
            continue
        try:
            data = fn(result.plan)
        except NotImplementedError:
            return None, "The checkpoint estimate is not implemented yet: section skipped."
        return (data.to_dict() if hasattr(data, "to_dict") else data), None
    return None, "advisor.ledger.checkpoint offers none of " + ", ".join(_CHECKPOINT_FUNCS) + ": section skipped."


# --- HTML ---------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#1b1b1b;padding:0 1rem;line-height:1.45}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:.9rem}.note{background:#fff8e1;border-left:4px solid #e6a700;padding:.5rem .8rem}
table{border-collapse:collapse;width:100%;font-size:.88rem}th,td{border:1px solid #ddd;padding:.3rem .5rem;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.sev-error{color:#b00020;font-weight:600}.sev-warning{color:#8a5a00;font-weight:600}.sev-info{color:#055a8c}
.ok{color:#116b1b;font-weight:600}.bad{color:#b00020;font-weight:700}.chart svg{max-width:100%;height:auto}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.85em}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dt{font-weight:600}dd{margin:0}
pre{background:#f6f6f6;padding:.6rem;overflow:auto;font-size:.8rem}
var{font-style:italic;color:#8a3b00}table+table{margin-top:.8rem}
"""


def _e(x: Any) -> str:
    """``x`` as HTML text: control characters (a key's ESC) as ``\\xNN`` and lone surrogates as
    ``\\udXXXX``, the text report's escaping (:func:`advisor.render.escape.safe_text`), then HTML-escaped."""
    from advisor.render.escape import safe_text
    return html.escape(safe_text(str(x)), quote=True)


#: The page's unit system, set by :func:`render_html` for the helpers below (one page, one unit).
_UNITS = [DEFAULT_UNITS]


def _gb(n: int | None) -> str:
    return size(n, _UNITS[0])


_APOSTROPHE = re.compile(r"(?<=\w)'(?=\w)")
_JSON_FRAGMENT = re.compile(r"\{[^{}]*\}")


def _prose(text: Any) -> str:
    """Escaped prose: apostrophes inside words become typographic ones (so a straight quote on the
    page only ever comes from data), and JSON fragments quoted in a note (``{"load_universal":
    true}``) are set as code."""
    out, last = [], 0
    s = str(text)
    for m in _JSON_FRAGMENT.finditer(s):
        out.append(_e(_APOSTROPHE.sub("\u2019", s[last:m.start()])))
        out.append(f"<code>{_e(m.group(0))}</code>")
        last = m.end()
    out.append(_e(_APOSTROPHE.sub("\u2019", s[last:])))
    return "".join(out)


def _value(v: Any) -> str:
    """One scalar as page text: None as a dash, booleans as yes/no, ints with separators."""
    if v is None:
        return "\u2014"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.4g}"
    return _prose(v)


def _dl(d: dict[str, Any]) -> str:
    """A nested definition list for a dict: no reprs (None is a dash, a list of dicts is a list of
    definition lists, a dict of {pointer, message} is one line)."""
    rows = []
    for k, v in d.items():
        if isinstance(v, dict):
            val = _dl(v) if v else "\u2014"
        elif isinstance(v, list):
            val = ("<ul>" + "".join(f"<li>{_item(i)}</li>" for i in v) + "</ul>") if v else "\u2014"
        else:
            val = _value(v)
        rows.append(f"<dt>{_e(key_words(k))}</dt><dd>{val}</dd>")  # "grad_accum": the text's words
    return "<dl>" + "".join(rows) + "</dl>"


def _item(i: Any) -> str:
    if isinstance(i, dict):
        if set(i) == {"pointer", "message"}:
            return f"<code>{_e(i['pointer'] or '/')}</code>: {_prose(i['message'])}"
        return _dl(i)
    return _value(i)


def _bytes(n: int | None) -> str:
    """Exact bytes, with GB/GiB once it is large enough to matter."""
    if n is None:
        return "\u2014"
    return f"{n:,} bytes" + (f" ({size(n, _UNITS[0])})" if n >= 10**6 else "")


def _secs(s: float | None) -> str:
    return duration_text(s, "\u2014")


def _bandwidth(b: float | None) -> str:
    return "\u2014" if b is None else rate(b, _UNITS[0])


# --- checkpoint section -------------------------------------------------------------------------

#: Where a rank number appears in a checkpoint path (DeepSpeed 0.19.8 names): the ZeRO shard files
#: and the per-rank copies of the NVMe swap folder.
_RANK_IN_PATH = re.compile(r"(zero_pp_rank_|/rank)(\d+)(?=[_/])")
_TAG_VAR = re.compile(r"\{(\w+)\}")


def _rank_span(ranks: "list[int] | RankSet", width: int) -> str:
    """``0..7`` for a contiguous run of ranks, else the runs (the first 8, then an ellipsis and
    the count); O(ranges) for a :class:`advisor.ledger.ranks.RankSet`."""
    rs = ranks if isinstance(ranks, RankSet) else RankSet.of(ranks)
    fmt = (lambda r: f"{r:0{width}d}") if width else str
    spans = [fmt(a) if b == a + 1 else f"{fmt(a)}..{fmt(b - 1)}" for a, b in rs.ranges]
    if len(spans) == 1:
        return spans[0]
    return ",".join(spans[:8]) + (f",\u2026 ({len(rs):,} ranks)" if len(spans) > 8 else "")


def group_checkpoint_files(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Files that differ only in the writing rank's number (and have the same size and kind)
    folded into one row: ``{"path", "ranks", "rank_width", "bytes", "kind", "parts", "readers",
    "formula"}``, in first-seen order. ``path`` holds ``\x00`` where the rank number was."""
    rows: dict[tuple, dict[str, Any]] = {}
    for f in files:
        path, width = f["path"], 0
        m = next((m for m in _RANK_IN_PATH.finditer(path) if int(m.group(2)) == f.get("rank")), None)
        if m is not None:
            digits = m.group(2)
            width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
            path = path[:m.start(2)] + "\x00" + path[m.end(2):]
        key = (path, width, f["bytes"], f.get("kind"), f.get("readers"))
        row = rows.get(key)
        if row is None or m is None:
            key = key if m is not None else (f["path"], id(f))
            rows[key] = {"path": path if m is not None else f["path"], "ranks": [f.get("rank")], "rank_width": width,
                         "bytes": f["bytes"], "kind": f.get("kind", ""), "parts": dict(f.get("parts") or {}),
                         "readers": f.get("readers"), "formula": f.get("formula", "")}
        else:
            row["ranks"].append(f.get("rank"))
        if f.get("count", 1) > 1:  # one entry standing for many ranks (checkpoint.LIST_RANKS_UP_TO)
            rows[key]["span"] = f"{f['count']} ranks ({f['rank']}, {f['rank'] + f.get('rank_stride', 1)}, ...)"
    return list(rows.values())


def _path_html(row: dict[str, Any]) -> str:
    """A grouped path as HTML: placeholders (the tag's ``{N}``, the rank span) in <var>."""
    span = _rank_span(row["ranks"], row["rank_width"]) if "\x00" in row["path"] else ""
    out = []
    for piece in re.split(r"(\x00|\{\w+\})", row["path"]):
        if piece == "\x00":
            out.append(f"<var>{_e(span)}</var>")
        elif _TAG_VAR.fullmatch(piece):
            out.append(f"<var>{_e(piece[1:-1])}</var>")
        else:
            out.append(_e(piece))
    return "<code>" + "".join(out) + "</code>"


def checkpoint_html(ck: dict[str, Any]) -> str:
    """The checkpoint section from ``CheckpointPlan.to_dict()``: a summary table, the files
    (grouped per rank), the 16-bit export, storage, findings and notes. Keys that are absent or
    None are left out; nothing is printed as a Python or JSON value."""
    parts: list[str] = []
    opt = " + ".join(x for x in (ck.get("wrapper"), ck.get("basic_optimizer")) if x)
    parts.append(f"<p id=checkpoint-summary>What <code>engine.save_checkpoint</code> writes (DeepSpeed "
                 f"{_e(DEEPSPEED_VERSION)}): ZeRO-{_value(ck.get('zero_stage'))}"
                 + (f", {_e(opt)}" if opt else "")
                 + (f", world size {ck['world_size']:,}{_e(world_default_words(ck.get('world_size_source')))} "
                    f"(data-parallel {ck['dp_world_size']:,})"
                    if ck.get("world_size") is not None and ck.get("dp_world_size") is not None else "") + ".</p>")
    if ck.get("unsupported"):
        parts.append(f"<p class=note id=checkpoint-unsupported>Not saved: {_prose(ck['unsupported'])}</p>")
        return "\n".join(parts)

    files = ck.get("files") or []
    if files:
        rows = []
        for r in group_checkpoint_files(files):
            n = len(r["ranks"])
            who = (_e(r["span"]) if "span" in r else f"rank {r['ranks'][0]}" if n == 1
                   else f"ranks {_e(_rank_span(r['ranks'], 0))}")
            content = "; ".join(f"{_e(k.replace('_', ' '))} {_bytes(v)}" for k, v in r["parts"].items()
                                if isinstance(v, int)) if len(r["parts"]) > 1 else ""
            rows.append(f"<tr title='{_e(r['formula'])}'><td>{_path_html(r)}</td><td>{_e(r['kind'])}</td>"
                        f"<td>{who}</td><td class=num>\u00d7 {n:,}</td><td class=num>{_bytes(r['bytes'])}"
                        f"{' each' if n > 1 else ''}</td><td class=num>{_bytes(r['bytes'] * n)}</td>"
                        f"<td>{content or chr(0x2014)}</td></tr>")
        parts.append("<table id=checkpoint-files><tr><th>file (under save_dir)</th><th>kind</th><th>written by</th>"
                     "<th>files</th><th>tensor bytes</th><th>total</th><th>contents</th></tr>"
                     + "".join(rows) + "</table>")

    summary: list[tuple[str, str, str]] = []  # (id, label, html)

    def add(key: str, label: str, html_: str | None) -> None:
        if html_ is not None:
            summary.append((key, label, html_))

    add("per-save", "per save", _bytes(ck["per_save_bytes"]) if ck.get("per_save_bytes") is not None else None)
    if ck.get("kept_bytes") is not None:
        add("kept", f"on disk, {ck.get('keep', 1):,} kept", _bytes(ck["kept_bytes"]))
    add("read", "read on a restart (same world size)",
        _bytes(ck["read_bytes"]) if ck.get("read_bytes") is not None else None)
    lw = ck.get("largest_writer") or {}
    if lw.get("rank") is not None and (ck.get("world_size") or 1) > 1:
        add("largest-writer", "largest writer", f"rank {lw['rank']}: {_bytes(lw['bytes'])} "
            f"({lw.get('share', 0):.0%} of the save)")
    if ck.get("save_s") is not None:
        add("save-time", "save time", f"{_secs(ck['save_s'])} at {_bandwidth(ck.get('write_bandwidth'))}")
    if ck.get("load_s") is not None:
        add("load-time", "load time", f"{_secs(ck['load_s'])} at {_bandwidth(ck.get('read_bandwidth'))}")
    res = ck.get("resilience") or {}
    if res.get("interval_s") is not None:
        steps = f" (about {res['interval_steps']:,} steps)" if res.get("interval_steps") else ""
        add("interval", "save interval", f"{_secs(res['interval_s'])}{steps}; "
            f"{_e(res.get('interval_formula', 'Young/Daly'))}")
        if res.get("cluster_mtbf_s") is not None:
            add("mtbf", "cluster MTBF", f"{_secs(res['cluster_mtbf_s'])} ({ck.get('nodes') or 1:,} nodes)")
        lf = res.get("lost_fraction") or {}
        if lf.get("total") is not None:
            add("lost", "time lost to failures", f"{lf['total']:.2%}" + "".join(
                f", {k} {lf[k]:.2%}" for k in ("saving", "rework", "restart") if lf.get(k) is not None))
        rc = res.get("recovery_s") or {}
        if rc.get("expected_total") is not None:
            add("recovery", "one failure costs", f"{_secs(rc['expected_total'])} expected, "
                f"{_secs(rc.get('worst_total'))} worst (restart {_secs(rc.get('restart'))}, reload "
                f"{_secs(rc.get('reload'))}, lost work {_secs(rc.get('lost_work_expected'))})")
    elif ck.get("save_s") is None:
        add("timing", "save time", "give the storage bandwidth (<code>ds-advisor checkpoint --write-bandwidth"
            "</code>, with <code>--node-mtbf-hours</code> for the save interval)")
    s16 = ck.get("save_16bit_model")
    if isinstance(s16, dict):
        if s16.get("writes"):
            line = (f"<code>{_e(s16.get('file', 'pytorch_model.bin'))}</code>, {_bytes(s16.get('bytes'))}, "
                    f"written by rank {_e(s16.get('rank', 0))}")
            if s16.get("gather_accelerator_bytes"):
                line += (f"; gathering it needs {_bytes(s16['gather_accelerator_bytes'])} accelerator memory on "
                         f"every rank (largest module) and {_bytes(s16.get('host_bytes_rank0'))} host memory on "
                         "rank 0")
        else:
            line = "writes nothing"
        if s16.get("note"):
            line += f"; {_prose(s16['note'])}"
        add("save16", "16-bit export (save_16bit_model)", line)
    if summary:
        parts.append("<table id=checkpoint-summary-table>" + "".join(
            f"<tr id=ckpt-{k}><th>{_e(label)}</th><td>{v}</td></tr>" for k, label, v in summary) + "</table>")

    st = ck.get("storage")
    if isinstance(st, dict):
        labels = {"save_dir": "save_dir", "tier": "storage tier", "access": "access", "mounts": "mounts",
                  "write_bytes_per_s": "write bandwidth", "read_bytes_per_s": "read bandwidth",
                  "capacity_bytes": "capacity", "rated_write_bytes": "rated writes", "endurance": "endurance",
                  "warranty_days": "warranty", "ranks_per_node": "ranks per node",
                  "bytes_written_per_save": "written per save", "written_by": "written by", "save_interval_s": "save interval",
                  "interval_source": "interval from", "saves_per_day": "saves per day",
                  "bytes_written_per_day": "written per day",
                  "drive_writes_per_day": "drive writes per day", "endurance_used_per_day": "endurance used per day",
                  "days_of_life": "days until the rated writes are used",
                  "checkpoint_bytes_per_day": "of which checkpoint saves", "swap_bytes_per_day": "of which NVMe swap",
                  "shares_tier_with": "shares the tier with"}
        rows = []
        for k, v in st.items():
            if v is None or v == []:
                continue
            if k.endswith("bytes_per_s"):
                val = _bandwidth(v)
            elif k.endswith("_bytes") or k.startswith("bytes_") or k.endswith("_bytes_per_day"):
                val = _bytes(int(v))
            elif k.endswith("_s"):
                val = _secs(v)
            elif k == "mounts":
                val = ", ".join(f"<code>{_e(x)}</code>" for x in v)
            elif k == "endurance_used_per_day":
                val = f"{v:.4%}"
            elif isinstance(v, float):
                val = f"{v:,.2f}"
            elif isinstance(v, (list, dict)):
                val = _dl(v) if isinstance(v, dict) else ", ".join(_value(x) for x in v)
            else:
                val = _value(v)
            rows.append(f"<tr><th>{_e(labels.get(k, k.replace('_', ' ')))}</th><td>{val}</td></tr>")
        if rows:
            parts.append("<h3>Checkpoint storage</h3><table id=checkpoint-storage>" + "".join(rows) + "</table>")

    fs = [f for f in ck.get("findings") or [] if isinstance(f, dict)]
    if fs:
        parts.append("<ul id=checkpoint-findings>" + "".join(
            f"<li><code>{_e(f.get('code', ''))}</code> <span class='sev-{_e(f.get('severity', ''))}'>"
            f"{_e(f.get('severity', ''))}</span>: {_prose(f.get('message', ''))}"
            + (f" (fix: {_prose(f['fix'])})" if f.get("fix") else "") + "</li>" for f in fs) + "</ul>")
    notes = [n for n in ck.get("notes") or [] if n]
    if notes:
        parts.append("<ul id=checkpoint-notes>" + "".join(f"<li>{_prose(n)}</li>" for n in notes) + "</ul>")
    return "\n".join(parts)


#: The step-time resources in the order estimate's breakdown lists them, with its names.
_STEP_RESOURCES = tuple(RESOURCE_NAMES.items())


def step_time_html(stt: dict[str, Any], given_step_time_s: float | None = None,
                   units: str = DEFAULT_UNITS) -> str:
    """The report's step-time section from estimate's ``step_time`` section (the data the text
    report renders, :func:`advisor.views.estimate.step_time_section`): the step seconds, a table of
    each resource's busy and exposed seconds, and the breakdown's lines (the CPU optimizer step,
    the bandwidths used, the unknown terms, the notes; :func:`advisor.render.text.step_time_lines`,
    sizes in ``units``)."""
    from advisor.render.text import step_time_lines
    out = ["<h2 id=step-time>Step time per optimizer step (model)</h2>"]
    total = stt.get("step_time_s")
    if total is None:
        out.append(f"<p class=note id=step-time-note>Step time not modelled: {_e(stt.get('why') or 'unknown')}.</p>")
        return "".join(out)
    a = stt.get("assumptions") or {}
    seq = stt.get("seq_len") or 0
    out.append(f"<p>The critical path of one optimizer step: <b id=step-time-s data-seconds={total!r}>"
               f"{total:,.2f} s</b> (MFU {_e(a.get('mfu'))}, {_e(a.get('mfu_source'))}; sequence "
               f"{seq:,} tokens). Busy: the seconds each resource works; exposed: the part the step waits for.</p>")
    busy, exp = stt.get("busy_seconds_by_resource") or {}, stt.get("exposed_seconds_by_resource") or {}
    from advisor.ledger.steptime import seconds_cell  # "?" / ">=" for a resource whose time is unknown
    marks = stt.get("unknown_resources") or {}
    rows = "".join(f"<tr id=step-time-{k}><td>{_e(name)}</td><td class=num>{_e(seconds_cell(busy[k], marks.get(k), 0))}</td>"
                   f"<td class=num>{_e(seconds_cell(exp.get(k, 0.0), marks.get(k), 0))}</td></tr>"
                   for k, name in _STEP_RESOURCES if k in busy)
    out.append("<table id=step-time-table><tr><th>resource</th><th>busy (s)</th><th>exposed (s)</th></tr>"
               f"{rows}</table>")
    lines = step_time_lines(stt, given_step_time_s, units)
    head = {f"  {name:<20}" for _, name in _STEP_RESOURCES}
    rest = [x.strip() for x in lines[1:] if not any(x.startswith(h) for h in head)]
    if rest:
        out.append("<ul id=step-time-lines>" + "".join(
            f"<li{' class=bad' if x.startswith('unknown:') else ''}>{_e(x)}</li>" for x in rest) + "</ul>")
    return "".join(out)


def render_html(result: "EstimateResult", units: str = DEFAULT_UNITS) -> str:
    """The whole report page for ``result`` (a string of HTML, self-contained), every byte figure
    in ``units`` (GiB or GB; exact byte counts alongside)."""
    _UNITS[0] = units
    GIB = UNITS[units]
    U = unit_name(units)
    d = result.to_dict(rank_sets=True)  # roles' ranks as RankSet ranges, never listed
    bars = tier_bars(result) if result.roles else []
    parts: list[str] = []
    m, cl = d["model"], d["cluster"]
    parts.append(f"<h1>ds-advisor report: {_e(d['config'])}</h1>")
    from advisor.render.text import param_words
    parts.append(f"<p class=meta>{_e(m['name'])}: {_e(param_words(m))}; world size {cl['world_size']} (data-parallel {cl['dp_world_size']}, "
                 f"{cl['gpus_per_node'] or 'unknown'} per node); DeepSpeed {_e(DEEPSPEED_VERSION)} accounting; "
                 f"{_e(d['tool'])}; sizes in {_e(U)} ({_e(unit_note(units))})</p>")
    from advisor.config.versions import release_note
    parts.append(f"<p class=meta id=deepspeed-release>release: {_e(release_note())}; {_e(d.get('accounting', ''))}</p>")

    parts.append("<h2 id=tiers>Training state per tier</h2>")
    if not bars:  # DeepSpeed refuses the config (M090): nothing to account for
        why = d.get("unsupported") or "no rank holds any state"
        parts.append(f"<p class=note id=unsupported>No estimate: {_prose(why)}. See the findings below.</p>")
    else:
        parts.append("<p>One bar per tier, one segment per state class: what is live at the tier's peak instant "
                     "(named in the table), so the bar is the tracked peak. Dotted line: the need the fit check "
                     "compares (the peak, plus the runtime overhead on the accelerator); dashed red line: the "
                     "tier's capacity, when known.</p>")
        parts.append(f"<div class=chart id=tier-chart>{tier_chart_svg(bars, units)}</div>")
        rows = "".join(
            f"<tr><td>{_e(b.tier)}</td><td>{_e(b.scope)}{(', at ' + _e(b.at)) if b.at else ''}</td>"
            + "".join(f"<td class=num>{_gib(b.classes.get(c, 0)):,.2f}</td>" for c in CLASS_COLORS)
            + f"<td class=num><b>{_gib(b.total):,.2f}</b></td></tr>" for b in bars)
        parts.append("<table id=tier-table><tr><th>tier</th><th>scope</th>"
                     + "".join(f"<th>{_e(CLASS_LABELS[c])} ({U})</th>" for c in CLASS_COLORS)
                     + f"<th>total ({U})</th></tr>{rows}</table>")

    figures_from = len(parts)  # the fit, timeline and movement sections: none for a refused config
    parts.append(f"<h2 id=fit>Fit</h2><p>Per tier: the bytes live together at the peak instant, each margin the need "
                 f"adds on top of them, and the need against the capacity ({_e(unit_note(units))}).</p>"
                 "<table id=fit-table><tr><th>tier</th><th>scope</th><th></th><th>phase</th>"
                 "<th>bytes</th><th>capacity</th><th>headroom</th><th>verdict</th></tr>")
    for f in d["fit"]:
        tier = _e(f["tier"])
        ge = "&ge; " if f.get("lower_bound") else ""  # the peak is a floor (rule M104): so is the need
        verdict = (f"<span class=meta>{_e(capacity_wanted(f['tier']))}</span>" if f["fits"] is None else
                   "<span class=bad>TIGHT (peak is a lower bound: M104"
                   + ("; within the runtime overhead's band: M102" if 0 <= (f["headroom"] or 0) < f.get("uncertainty", 0)
                      else "") + ")</span>" if f.get("verdict") == "tight" and ge else
                   "<span class=bad>TIGHT</span>" if f.get("verdict") == "tight" else
                   "<span class=ok>fits</span>" if f["fits"] else "<span class=bad>DOES NOT FIT</span>")
        peak = f.get("peak", f["need"])
        parts.append(f"<tr id=fit-peak-{tier}><td>{tier}</td><td>{_e(f['scope'])}</td><td>peak live</td>"
                     f"<td>{_e(key_words(f.get('phase') or ''))}</td><td class=num data-bytes={int(peak)}>{ge}{_gb(peak)}</td>"
                     "<td></td><td></td><td></td></tr>")
        for p in f.get("parts") or []:
            parts.append(f"<tr class=fit-part><td></td><td></td><td>+ {_e(p['label'])}</td><td></td>"
                         f"<td class=num data-bytes={int(p['bytes'])}>{_gb(p['bytes'])}</td><td></td><td></td><td></td></tr>")
        parts.append(f"<tr id=fit-{tier}><td></td><td></td><td><b>= need</b></td><td></td>"
                     f"<td class=num id=fit-need-{tier} data-bytes={int(f['need'])}><b>{ge}{_gb(f['need'])}</b></td>"
                     f"<td class=num>{_gb(f['capacity'])}</td>"
                     f"<td class=num>{'' if f['headroom'] is None else _gb(f['headroom'])}</td><td>{verdict}</td></tr>")
    parts.append("</table>")
    if d["ranks"]:
        worst = max(d["ranks"], key=lambda r: r["peak"]["accelerator"]["bytes"])
        pk = worst["peak"]["accelerator"]
        rk = worst["ranks"]
        who = f"rank {rk[0]}" if len(rk) == 1 else f"ranks {_rank_span(rk, 0)}"
        lb = d["assumptions"].get("peak_lower_bound")
        parts.append(f"<p>Accelerator peak of the worst rank ({_e(who)}, {_e(key_words(pk['phase']))} phase), before the "
                     f"runtime overhead rows{', at least (a lower bound, M104: ' + _e(lb) + ')' if lb else ''}: "
                     f"<span id=peak-accelerator data-bytes={int(pk['bytes'])}>{_bytes(pk['bytes'])}</span>.</p>")

    if d["ranks"]:
        worst = max(d["ranks"], key=lambda r: r["peak"]["accelerator"]["bytes"])
        svg = timeline_chart_svg(worst.get("timeline") or [], worst["peak"], units)
        if svg:
            rk = worst["ranks"]
            who = f"rank {rk[0]}" if len(rk) == 1 else f"ranks {_rank_span(rk, 0)}"
            tops = "; ".join(
                f"{_e(t)} at {_e(worst['peak'][t]['label'])}: " + ", ".join(
                    f"{_e(c['item'])} {_bytes(c['bytes'])}" for c in worst["peak"][t].get("top", []))
                for t in ("accelerator", "host", "nvme") if worst["peak"][t]["bytes"])
            parts.append(f"<h2 id=timeline>Live bytes over the step ({_e(who)})</h2>"
                         "<p>What is live together at each instant of the step timeline (load, initialize, "
                         "forward/backward, reduce, first and steady optimizer step, save); a star marks each "
                         f"tier's peak"
                         + (" (the accelerator's a lower bound, M104: " + _e(d["assumptions"]["peak_lower_bound"]) + ")"
                            if d["assumptions"].get("peak_lower_bound") else "")
                         + f". Largest contributors at the peak: {tops}.</p>"
                         f"<div class=chart id=timeline-chart>{svg}</div>")

    stt = d.get("step_time")
    if stt:
        parts.append(step_time_html(stt, (d.get("movement") or {}).get("step_time_s"), units))

    parts.append("<h2 id=movement>Data movement per optimizer step</h2>")
    # a refused config's sections are dropped below: its movements are never computed (with
    # gradient_accumulation_steps 1e308, B002's refusal, they overflowed to int(inf); issue 21)
    movements, note = movement_section(result) if bars else (None, "refused")
    svg = movement_chart_svg(movements, units=units) if movements is not None else None
    if note:
        parts.append(f"<p class=note id=movement-note>{_e(note)}</p>")
    elif svg is None:
        parts.append("<p class=note id=movement-note>Nothing moves between tiers or ranks per step for rank 0.</p>")
    else:
        from advisor.ledger.movement import CROSSING_WORDS, link_label
        crossed = sorted({m.crosses for m in movements} - {None}, reverse=True)
        parts.append("<p>Bytes rank 0 moves per optimizer step by link and direction" + "".join(
            f"; {link_label({'link': 'network', 'crosses': c})}: what a rank sends in its collectives {CROSSING_WORDS[c]}"
            for c in crossed) + ".</p>")
        parts.append(f"<div class=chart id=movement-chart>{svg}</div>")
        # why a movement's time is unknown (no --hardware, or a link the spec gives no bandwidth): the text table's note
        from advisor.render.text import movement_time_note
        why = movement_time_note(d["movement"]) if d.get("movement") else None
        if why:
            parts.append(f"<p class=note id=movement-time-note>Some movement times are unknown (the text report's "
                         f"\"?\"): {_e(why)}.</p>")
    # the drive's wear (bytes written per step and per day, endurance used, projected life): estimate's own
    # movement section, the lines the text report prints (render.text.endurance_lines), nothing recomputed
    from advisor.render.text import endurance_lines
    wear = endurance_lines(d["movement"], units) if d.get("movement") else []
    if wear:
        parts.append("<h3 id=storage-wear>Storage writes and drive wear</h3><ul id=storage-wear-lines>"
                     + "".join(f"<li>{_e(x)}</li>" for x in wear) + "</ul>")
    if not bars:  # refused (M090): "No estimate" above, so no fit table or figures either
        del parts[figures_from:]

    parts.append(f"<h2 id=findings>Findings ({len(d['findings'])})</h2>")
    if d["findings"]:
        parts.append("<table id=findings-table><tr><th>code</th><th>severity</th><th>where</th><th>message</th>"
                     "<th>fix</th></tr>")
        for fo, f in zip(result.findings, d["findings"]):
            where = fo.shown_pointer  # "/" for the document; "(absent: DeepSpeed's default)" for a key not written
            if fo.set_arg is not None:  # a key a --set wrote: the argument, not a line of the file
                where += f" ({fo.set_arg})"
            elif f.get("line"):
                where += f" (line {f['line']})"
            msg, fix = fo.text(units)  # sizes in the report's units
            parts.append(f"<tr><td><code>{_e(f['code'])}</code></td><td class='sev-{_e(f['severity'])}'>"
                         f"{_e(f['severity'])}</td><td><code>{_e(where)}</code></td><td>{_e(msg)}</td>"
                         f"<td>{_e(fix)}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p>No findings.</p>")

    parts.append("<h2 id=assumptions>Assumptions</h2>")
    parts.append(_dl(d["assumptions"]))

    parts.append("<h2 id=checkpoint>Checkpoint</h2>")
    ck, note = checkpoint_section(result)
    if note:
        parts.append(f"<p class=note id=checkpoint-note>{_e(note)}</p>")
    elif isinstance(ck, dict):
        parts.append(checkpoint_html(ck))
    else:
        parts.append(f"<p class=note id=checkpoint-note>The checkpoint estimate has an unexpected shape "
                     f"({_e(type(ck).__name__)}): section skipped.</p>")

    body = "\n".join(parts)
    return ("<!DOCTYPE html>\n<html lang=en>\n<head>\n<meta charset=utf-8>\n"
            "<meta name=viewport content='width=device-width, initial-scale=1'>\n"
            "<link rel=icon href='data:,'>\n"
            f"<title>ds-advisor report: {_e(d['config'])}</title>\n<style>{CSS}</style>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")


