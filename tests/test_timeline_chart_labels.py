"""The HTML report's "Live bytes over the step" chart keeps every x-tick label on its canvas
(issue 15: the initialize label of ZeRO-1/2's host flat copy ran off it). Read from the SVG
itself: each label's lines, where the SVG places them (``translate(x y) rotate(-60)``: a line
starts at (x, y) and runs up-right at 60 degrees) and the viewBox; no pixels."""

from __future__ import annotations

import html
import math
import re

from advisor.render.html import TICK_CHARS, TICK_LINES, timeline_chart_svg

LONG = "initialize: ZeRO-1/2 flattens a param group in host memory when the accelerator has no room"
LABELS = (["load", "initialize: cast", LONG, "initialize"]
          + [f"first optimizer step, sub-group {i}: update" for i in range(12)] + ["steady optimizer step"])


def _svg():
    tl = [{"instant": f"i{k}", "label": lab, "accelerator": (k + 1) * 2 ** 30, "host": 2 ** 29, "nvme": 0}
          for k, lab in enumerate(LABELS)]
    return timeline_chart_svg(tl, {"accelerator": {"bytes": len(LABELS) * 2 ** 30, "instant": f"i{len(LABELS) - 1}"}})


def _ticks(svg):
    out = {}
    for m in re.finditer(r'<g id="timeline-tick-(\d+)">(.*?)</g>', svg, re.S):
        title = re.search(r"<title>(.*?)</title>", m.group(2), re.S)
        lines = []
        for attrs, txt in re.findall(r"<text ([^>]*)>([^<]*)</text>", m.group(2)):
            fs = float(re.search(r"font-size: ([\d.]+)px", attrs).group(1))
            # matplotlib writes a line as translate(x y) rotate(a), or x=, y= with rotate(a x y)
            t = re.search(r'translate\(([-\d.]+) ([-\d.]+)\) rotate\(([-\d.]+)\)', attrs)
            if t:
                x, y, rot = map(float, t.groups())
            else:
                rot, x, y = map(float, re.search(r'rotate\(([-\d.]+) ([-\d.]+) ([-\d.]+)\)', attrs).groups())
            lines.append((x, y, fs, rot, html.unescape(txt)))
        out[int(m.group(1))] = (html.unescape(title.group(1)) if title else None, lines)
    return out


def test_every_tick_label_keeps_its_whole_text_in_a_title_and_its_lines_are_its_start():
    ticks = _ticks(_svg())
    assert sorted(ticks) == list(range(len(LABELS)))
    for i, (title, lines) in ticks.items():
        assert title == LABELS[i]
        shown = " ".join(t for *_, t in lines)
        assert 1 <= len(lines) <= TICK_LINES and all(len(t) <= TICK_CHARS for *_, t in lines)
        if shown.endswith("\u2026"):
            assert LABELS[i].startswith(shown[:-1]) and len(LABELS[i]) > len(shown) - 1
        else:
            assert shown == LABELS[i]
    assert _ticks(_svg())[2][1][-1][-1].endswith("\u2026")  # the long one is cut, whole in its <title>


def test_every_tick_labels_lines_lie_inside_the_viewbox():
    svg = _svg()
    w, h = map(float, re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups())
    ticks = _ticks(svg)
    assert sorted(ticks) == list(range(len(LABELS))) and all(lines for _, lines in ticks.values())
    for i, (_, lines) in ticks.items():
        for x, y, fs, rot, text in lines:
            a = math.radians(-rot)
            # the line's start (where a clipped label lost its text), with a descender's room (0.3 em)
            # below it, and how high its far end can reach, every glyph taken as wide as the font
            # size (DejaVu Sans's are narrower: an upper bound); its far end is at its tick, inside
            # the axes (ha="right", rotation_mode="anchor")
            assert 0 <= x <= w and y + 0.3 * fs <= h, (i, text, x, y, (w, h))
            assert y - len(text) * fs * math.sin(a) >= 0, (i, text, y)
