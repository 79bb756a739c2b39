"""``ds-advisor report``: one self-contained HTML page for an estimate.

The page needs no network: CSS is inline, charts are inline SVG written by matplotlib (SVG
backend, text kept as text, no embedded fonts), and there are no scripts. Sections:

1. **State per tier** — one stacked bar per tier (accelerator, host, nvme), one segment per
   state class, in GiB. The accelerator bar is the worst rank (the role with the highest
   accelerator peak), per rank; the host and NVMe bars are summed over the ranks of one node
   (``gpus_per_node``, default min(world size, 8)), as the estimate's fit rows are. Segments
   count every lifetime (persistent, backward and step transients), so a bar can exceed the
   peak; a dotted line marks the fit row's need (the peak, plus the fragmentation margin on the
   accelerator) and a dashed red line the tier's capacity when one is known. SVG ids (matplotlib
   ``gid``) are stable: ``tier-bar-<tier>`` (the bar's outline), ``seg-<tier>-<class>``,
   ``need-<tier>``, ``capacity-<tier>``.
2. **Movement per step** — bytes rank 0 moves per optimizer step by link and direction
   (:func:`advisor.traffic.movement_for`), one stacked bar per link/direction with segments per
   state class (ids ``move-<link>-<direction>``); skipped with a note when the module is absent.
3. **Findings**, 4. **Fit**, 5. **Assumptions**, 6. **Checkpoint** (from ``advisor.checkpoint``
   when that module is present; otherwise a note).

matplotlib is imported only here, and only inside the functions that draw.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import io
import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from advisor import DEEPSPEED_VERSION, __version__
from advisor.files import write_atomic  # noqa: F401  (re-exported: callers and tests use it from here)

if TYPE_CHECKING:
    from advisor.estimate import EstimateResult

TIERS = ("accelerator", "host", "nvme")
GIB = 2 ** 30
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

    @property
    def total(self) -> int:
        """Sum of the class segments."""
        return sum(self.classes.values())


def tier_bars(result: "EstimateResult") -> list[TierBar]:
    """The three bars of the tier chart: accelerator for the worst rank; host and NVMe summed
    over one node's ranks (the same node :func:`advisor.estimate.fit_rows` uses)."""
    cl = result.plan.cluster
    per_node = cl.gpus_per_node or min(cl.world_size, 8)
    by_rank = {r: role for role in result.roles for r in role.ranks}
    node = [by_rank[r] for r in sorted(by_rank)[:per_node]]
    scale = max(1, per_node // max(1, len(node)))
    worst = max(result.roles, key=lambda r: r.peak()["accelerator"]["bytes"])
    fit = {f.tier: f for f in result.fit}
    bars = []
    for tier in TIERS:
        if tier == "accelerator":
            t = worst.tiers()[tier]
            classes = {c: v for c, v in t.items() if c != "total"}
            r = worst.ranks
            scope = f"per rank (rank {r[0]})" if len(r) == 1 else f"per rank (ranks {r[0]}..{r[-1]}, {len(r)} ranks)"
        else:
            classes = {}
            for role in node:
                for c, v in role.tiers()[tier].items():
                    if c != "total":
                        classes[c] = classes.get(c, 0) + v * scale
            scope = f"per node ({per_node} ranks)"
        f = fit.get(tier)
        bars.append(TierBar(tier, scope, classes, f.need if f else None, f.capacity if f else None))
    return bars


def _svg_text(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": f"ds-advisor {__version__}"})
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


def tier_chart_svg(bars: list[TierBar]) -> str:
    """Inline SVG: one stacked bar per tier, segments per class (GiB), need and capacity lines."""
    fig, axes = _figure(10.5, 4.2, len(bars))
    for ax, b in zip(axes, bars):
        bottom = 0.0
        for cls, color in CLASS_COLORS.items():
            v = b.classes.get(cls, 0) / GIB
            if v <= 0:
                continue
            (rect,) = ax.bar([0], [v], bottom=[bottom], width=0.6, color=color, label=CLASS_LABELS[cls])
            rect.set_gid(f"seg-{b.tier}-{cls}")
            bottom += v
        (outline,) = ax.bar([0], [b.total / GIB], width=0.6, fill=False, edgecolor="#222222", linewidth=1.0)
        outline.set_gid(f"tier-bar-{b.tier}")
        top = b.total / GIB
        if b.need is not None:
            ln = ax.axhline(b.need / GIB, color="#222222", linestyle=":", linewidth=1.5, label="need (peak)")
            ln.set_gid(f"need-{b.tier}")
            top = max(top, b.need / GIB)
        if b.capacity is not None:
            ln = ax.axhline(b.capacity / GIB, color="#D55E00", linestyle="--", linewidth=1.8, label="capacity")
            ln.set_gid(f"capacity-{b.tier}")
            top = max(top, b.capacity / GIB)
        ax.set_xlim(-0.8, 0.8)
        ax.set_ylim(0, top * 1.12 if top > 0 else 1)
        ax.set_xticks([0])
        ax.set_xticklabels([b.tier])
        ax.set_title(f"{b.tier}\n{b.scope}", fontsize=9)
        ax.set_ylabel("GiB" if ax is axes[0] else "")
        ax.text(0, b.total / GIB, f"{b.total / GIB:,.2f}", ha="center", va="bottom", fontsize=8)
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="center right", fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.07, right=0.78, top=0.84, bottom=0.1, wspace=0.45)
    return _svg_text(fig)


def movement_chart_svg(movements: list, rank: int = 0) -> str | None:
    """Inline SVG: bytes ``rank`` moves per optimizer step, one horizontal stacked bar per
    link/direction, segments per state class (GiB). None when nothing moves."""
    agg: dict[str, dict[str, int]] = {}
    for m in movements:
        if m.rank != rank or m.bytes <= 0:
            continue
        d = agg.setdefault(f"{m.link}/{m.direction}", {})
        d[m.cls] = d.get(m.cls, 0) + m.bytes
    if not agg:
        return None
    keys = sorted(agg)
    fig, (ax,) = _figure(10.5, 0.6 + 0.5 * len(keys))
    for y, k in enumerate(keys):
        left = 0.0
        for cls, v in sorted(agg[k].items(), key=lambda kv: list(CLASS_COLORS).index(kv[0])
                             if kv[0] in CLASS_COLORS else 99):
            (rect,) = ax.barh([y], [v / GIB], left=[left], height=0.6, color=CLASS_COLORS.get(cls, "#444444"),
                              label=CLASS_LABELS.get(cls, cls))
            rect.set_gid(f"move-{k.replace('/', '-')}-{cls}")
            left += v / GIB
        ax.text(left, y, f" {left:,.2f}", va="center", fontsize=8)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(keys)
    ax.set_xlabel(f"GiB per optimizer step, rank {rank}")
    handles: dict[str, Any] = {}
    for h, lab in zip(*ax.get_legend_handles_labels()):
        handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="center right", fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.17, right=0.78, top=0.95, bottom=max(0.1, 0.5 / (0.6 + 0.5 * len(keys))))
    return _svg_text(fig)


# --- optional sections from other modules --------------------------------------------------------

def movement_section(result: "EstimateResult") -> tuple[list | None, str | None]:
    """(movements, note): movements from :mod:`advisor.traffic` when present, else a note why not."""
    if importlib.util.find_spec("advisor.traffic") is None:
        return None, "The movement ledger (advisor.traffic) is not part of this build: chart skipped."
    traffic = importlib.import_module("advisor.traffic")
    fn = getattr(traffic, "movement_for", None)
    if fn is None:
        return None, "advisor.traffic has no movement_for(): chart skipped."
    try:
        return list(fn(result.ledger)), None
    except NotImplementedError:
        return None, "The movement ledger is not implemented yet: chart skipped."


_CHECKPOINT_FUNCS = ("checkpoint_for", "checkpoint_report", "estimate_checkpoint", "checkpoint_sizes")


def checkpoint_section(result: "EstimateResult") -> tuple[Any, str | None]:
    """(data, note): the checkpoint estimate from ``advisor.checkpoint`` when it is present and
    has one of the functions in ``_CHECKPOINT_FUNCS`` taking the plan (or a ``checkpoint``
    section already in the estimate), as a dict; else a note."""
    if "checkpoint" in result.sections:
        return result.sections["checkpoint"], None
    if importlib.util.find_spec("advisor.checkpoint") is None:
        return None, "Checkpoint sizes (advisor.checkpoint) are not part of this build: section skipped."
    mod = importlib.import_module("advisor.checkpoint")
    for name in _CHECKPOINT_FUNCS:
        fn = getattr(mod, name, None)
        if fn is None:
            continue
        try:
            data = fn(result.plan)
        except NotImplementedError:
            return None, "The checkpoint estimate is not implemented yet: section skipped."
        return (data.to_dict() if hasattr(data, "to_dict") else data), None
    return None, "advisor.checkpoint offers none of " + ", ".join(_CHECKPOINT_FUNCS) + ": section skipped."


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
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _gb(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 1e9:,.2f} GB ({n / GIB:,.2f} GiB)"


def _dl(d: dict[str, Any]) -> str:
    rows = []
    for k, v in d.items():
        if isinstance(v, dict):
            val = _dl(v) if v else "—"
        elif isinstance(v, list):
            val = ("<ul>" + "".join(f"<li>{_e(json.dumps(i) if isinstance(i, dict) else i)}</li>" for i in v)
                   + "</ul>") if v else "—"
        else:
            val = _e(v)
        rows.append(f"<dt>{_e(k)}</dt><dd>{val}</dd>")
    return "<dl>" + "".join(rows) + "</dl>"


def render_html(result: "EstimateResult") -> str:
    """The whole report page for ``result`` (a string of HTML, self-contained)."""
    d = result.to_dict()
    bars = tier_bars(result)
    parts: list[str] = []
    m, cl = d["model"], d["cluster"]
    parts.append(f"<h1>ds-advisor report: {_e(d['config'])}</h1>")
    parts.append(f"<p class=meta>{_e(m['name'])}: {m['parameters']:,} parameters ({m['trainable_parameters']:,} "
                 f"trainable); world size {cl['world_size']} (data-parallel {cl['dp_world_size']}, "
                 f"{cl['gpus_per_node'] or 'unknown'} per node); DeepSpeed {_e(DEEPSPEED_VERSION)} accounting; "
                 f"{_e(d['tool'])}</p>")

    parts.append("<h2 id=tiers>Training state per tier</h2>")
    parts.append("<p>One bar per tier, one segment per state class (every lifetime counted). Dotted line: the "
                 "peak the fit check compares; dashed red line: the tier's capacity, when known.</p>")
    parts.append(f"<div class=chart id=tier-chart>{tier_chart_svg(bars)}</div>")
    rows = "".join(
        f"<tr><td>{_e(b.tier)}</td><td>{_e(b.scope)}</td>"
        + "".join(f"<td class=num>{b.classes.get(c, 0) / GIB:,.2f}</td>" for c in CLASS_COLORS)
        + f"<td class=num><b>{b.total / GIB:,.2f}</b></td></tr>" for b in bars)
    parts.append("<table id=tier-table><tr><th>tier</th><th>scope</th>"
                 + "".join(f"<th>{_e(CLASS_LABELS[c])} (GiB)</th>" for c in CLASS_COLORS)
                 + f"<th>total (GiB)</th></tr>{rows}</table>")

    parts.append("<h2 id=fit>Fit</h2><table><tr><th>tier</th><th>scope</th><th>need (peak)</th><th>phase</th>"
                 "<th>capacity</th><th>headroom</th><th>verdict</th></tr>")
    for f in d["fit"]:
        verdict = ("<span class=meta>give a capacity</span>" if f["fits"] is None else
                   "<span class=ok>fits</span>" if f["fits"] else "<span class=bad>DOES NOT FIT</span>")
        parts.append(f"<tr><td>{_e(f['tier'])}</td><td>{_e(f['scope'])}</td><td class=num>{_gb(f['need'])}</td>"
                     f"<td>{_e(f.get('phase', ''))}</td><td class=num>{_gb(f['capacity'])}</td>"
                     f"<td class=num>{'' if f['headroom'] is None else _gb(f['headroom'])}</td><td>{verdict}</td></tr>")
    parts.append("</table>")

    parts.append("<h2 id=movement>Data movement per optimizer step</h2>")
    movements, note = movement_section(result)
    svg = movement_chart_svg(movements) if movements is not None else None
    if note:
        parts.append(f"<p class=note id=movement-note>{_e(note)}</p>")
    elif svg is None:
        parts.append("<p class=note id=movement-note>Nothing moves between tiers or ranks per step for rank 0.</p>")
    else:
        parts.append("<p>Bytes rank 0 moves per optimizer step by link and direction (network: what a rank sends "
                     "in the data-parallel collectives).</p>")
        parts.append(f"<div class=chart id=movement-chart>{svg}</div>")

    parts.append(f"<h2 id=findings>Findings ({len(d['findings'])})</h2>")
    if d["findings"]:
        parts.append("<table id=findings-table><tr><th>code</th><th>severity</th><th>where</th><th>message</th>"
                     "<th>fix</th></tr>")
        for f in d["findings"]:
            where = f["pointer"] or "/"
            if f.get("line"):
                where += f" (line {f['line']})"
            parts.append(f"<tr><td><code>{_e(f['code'])}</code></td><td class='sev-{_e(f['severity'])}'>"
                         f"{_e(f['severity'])}</td><td><code>{_e(where)}</code></td><td>{_e(f['message'])}</td>"
                         f"<td>{_e(f['fix'])}</td></tr>")
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
        parts.append(_dl(ck))
    else:
        parts.append(f"<pre>{_e(json.dumps(ck, indent=2, default=str))}</pre>")

    body = "\n".join(parts)
    return ("<!DOCTYPE html>\n<html lang=en>\n<head>\n<meta charset=utf-8>\n"
            "<meta name=viewport content='width=device-width, initial-scale=1'>\n"
            "<link rel=icon href='data:,'>\n"
            f"<title>ds-advisor report: {_e(d['config'])}</title>\n<style>{CSS}</style>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")


