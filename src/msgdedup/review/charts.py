"""Server-side SVG charts for the batch list: plain strings, no JavaScript, nothing fetched.

Every value that reaches the markup is escaped (addresses and cache names come from manifests,
which come from input data). Each chart carries its numbers as text too: a ``<title>`` per bar
(the browser's tooltip, and what a screen reader reads) and a one-line headline, so nothing is
told by colour alone. A stale batch's bar is hatched and marked ``S``, an unpublished one's
hatched and marked ``U``.
"""

from __future__ import annotations

import html
from typing import Any, Callable, Sequence

WIDTH, HEIGHT = 960, 150
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 10, 40
BAR = "#3182ce"
STALE = "#c53030"
UNPUBLISHED = "#dd6b20"
GATE_COLOURS = {"passed": "#38a169", "failed": "#c53030", "outdated": "#dd6b20", "not run": "#a0aec0"}
GATE_SYMBOLS = {"passed": "✓", "failed": "✗", "outdated": "!", "not run": "–"}


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def state_of(point: dict[str, Any]) -> str:
    """``stale``, ``unpublished`` or ``ok``: what marks a batch in every chart."""
    if point.get("stale"):
        return "stale"
    if not point.get("published"):
        return "unpublished"
    return "ok"


MARKS = {"stale": "S", "unpublished": "U", "ok": ""}
STATE_WORDS = {"stale": "stale: re-run it", "unpublished": "not published", "ok": "published"}


def _defs(prefix: str) -> str:
    def hatch(name: str, colour: str) -> str:
        return (f"<pattern id='{prefix}-{name}' width='6' height='6' patternUnits='userSpaceOnUse' "
                f"patternTransform='rotate(45)'><rect width='6' height='6' fill='{colour}' opacity='.35'/>"
                f"<line x1='0' y1='0' x2='0' y2='6' stroke='{colour}' stroke-width='3'/></pattern>")
    return f"<defs>{hatch('stale', STALE)}{hatch('unpublished', UNPUBLISHED)}</defs>"


def _fill(prefix: str, state: str) -> str:
    return BAR if state == "ok" else f"url(#{prefix}-{state})"


def _slots(n: int) -> tuple[float, float]:
    slot = (WIDTH - LEFT - RIGHT) / max(n, 1)
    return slot, max(1.0, min(slot * 0.8, 40.0))


def _x_labels(points: Sequence[dict[str, Any]], slot: float) -> str:
    """First, middle and last batch id under the axis (all of them do not fit)."""
    if not points:
        return ""
    picks = sorted({0, len(points) // 2, len(points) - 1})
    out = []
    for i in picks:
        x = LEFT + slot * (i + 0.5)
        anchor = "middle"
        if len(points) > 1 and i == 0:
            anchor, x = "start", LEFT
        elif len(points) > 1 and i == len(points) - 1:
            anchor, x = "end", WIDTH - RIGHT
        out.append(f"<text x='{x:.1f}' y='{HEIGHT - 4}' text-anchor='{anchor}' font-size='11' "
                   f"fill='#4a5568'>{_e(points[i]['batch_id'])}</text>")
    return "".join(out)


def _mark(state: str, x: float, width: float, slot: float, y: float) -> str:
    """S/U under a stale/unpublished batch; where batches are too narrow for a letter (hundreds
    shown), a coloured tick instead (the batch is still named in its title and in the lists)."""
    mark = MARKS[state]
    if not mark:
        return ""
    colour = STALE if state == "stale" else UNPUBLISHED
    if slot < 9:
        return f"<rect class='mark' x='{x:.1f}' y='{y - 9}' width='{max(width, 2):.1f}' height='9' fill='{colour}'/>"
    return (f"<text class='mark' x='{x + width / 2:.1f}' y='{y}' text-anchor='middle' font-size='11' "
            f"font-weight='700' fill='{colour}'>{mark}</text>")


def bar_chart(key: str, title: str, points: Sequence[dict[str, Any]], value: Callable[[dict], float | None],
              fmt: Callable[[float], str], href: Callable[[dict], str]) -> str:
    """Bars per batch (oldest left), each a link to its batch, hatched and marked when the batch
    is stale or unpublished; a headline with the latest value and the maximum."""
    values = [value(p) for p in points]
    known = [v for v in values if v is not None]
    top = max(known) if known else 0.0
    scale = top if top > 0 else 1.0
    plot_h = HEIGHT - TOP - BOTTOM
    slot, width = _slots(len(points))
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='chart' id='chart-{_e(key)}' "
             f"viewBox='0 0 {WIDTH} {HEIGHT}' width='{WIDTH}' height='{HEIGHT}' role='img' "
             f"aria-label='{_e(title)} per batch'>", _defs(key)]
    base = TOP + plot_h
    parts.append(f"<line x1='{LEFT}' y1='{base}' x2='{WIDTH - RIGHT}' y2='{base}' stroke='#a0aec0'/>")
    parts.append(f"<text x='{LEFT - 6}' y='{TOP + 10}' text-anchor='end' font-size='11' "
                 f"fill='#4a5568'>{_e(fmt(top))}</text>")
    parts.append(f"<text x='{LEFT - 6}' y='{base}' text-anchor='end' font-size='11' fill='#4a5568'>0</text>")
    for i, (p, v) in enumerate(zip(points, values, strict=True)):
        state = state_of(p)
        x = LEFT + slot * i + (slot - width) / 2
        label = f"{p['batch_id']}: {'n/a' if v is None else fmt(v)}"
        label += "" if state == "ok" else f" ({STATE_WORDS[state]})"
        if v is None:
            bar = (f"<rect x='{x:.1f}' y='{base - 2}' width='{width:.1f}' height='2' fill='#cbd5e0'>"
                   f"<title>{_e(label)}</title></rect>")
        else:
            h = max(1.0 if v > 0 else 0.0, plot_h * v / scale)
            # An invisible full-height rectangle makes a zero bar clickable and hoverable too.
            bar = (f"<rect x='{x:.1f}' y='{TOP}' width='{width:.1f}' height='{plot_h}' fill='transparent'/>"
                   f"<rect class='bar bar-{state}' x='{x:.1f}' y='{base - h:.1f}' width='{width:.1f}' height='{h:.1f}' "
                   f"fill='{_fill(key, state)}'"
                   + (f" stroke='{STALE if state == 'stale' else UNPUBLISHED}'" if state != "ok" else "")
                   + f"><title>{_e(label)}</title></rect>")
        bar += _mark(state, x, width, slot, base + 13)
        parts.append(f"<a href='{_e(href(p))}'>{bar}</a>")
    parts.append(_x_labels(points, slot))
    parts.append("</svg>")
    return "".join(parts)


def headline(points: Sequence[dict[str, Any]], value: Callable[[dict], float | None],
             fmt: Callable[[float], str]) -> str:
    """``latest 2.1 % (2026-11-21T05) · max 9.0 % (2026-11-20T03)``: the chart in words."""
    known = [(p, value(p)) for p in points if value(p) is not None]
    if not known:
        return "no data"
    last_p, last_v = known[-1]
    max_p, max_v = max(known, key=lambda pv: pv[1])
    return f"latest {fmt(last_v)} ({last_p['batch_id']}) · max {fmt(max_v)} ({max_p['batch_id']})"


def gate_strip(points: Sequence[dict[str, Any]], href: Callable[[dict], str]) -> str:
    """One cell per batch: its gate result as a colour *and* a symbol (✓ ✗ ! –), stale and
    unpublished batches marked under it as in the bar charts."""
    height = 44
    slot, width = _slots(len(points))
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='chart' id='chart-gate' viewBox='0 0 {WIDTH} {height}' "
             f"width='{WIDTH}' height='{height}' role='img' aria-label='Gate result per batch'>"]
    for i, p in enumerate(points):
        gate, state = p["gate"], state_of(p)
        x = LEFT + slot * i + (slot - width) / 2
        label = f"{p['batch_id']}: gate {gate}" + ("" if state == "ok" else f" ({STATE_WORDS[state]})")
        cell = (f"<rect class='gate gate-{_e(gate.replace(' ', '-'))}' x='{x:.1f}' y='2' width='{width:.1f}' "
                f"height='22' fill='{GATE_COLOURS.get(gate, '#a0aec0')}'><title>{_e(label)}</title></rect>")
        if width >= 9:
            cell += (f"<text x='{x + width / 2:.1f}' y='18' text-anchor='middle' font-size='13' fill='white' "
                     f"pointer-events='none'>{GATE_SYMBOLS.get(gate, '?')}</text>")
        cell += _mark(state, x, width, slot, 38)
        parts.append(f"<a href='{_e(href(p))}'>{cell}</a>")
    parts.append("</svg>")
    return "".join(parts)


def fill_bar(pct: float | None) -> str:
    """A cache's latest fill as a 0-100 % bar with the number beside it."""
    w = 160
    filled = 0 if pct is None else min(pct, 100.0) / 100.0 * w
    colour = STALE if (pct or 0) >= 100 else UNPUBLISHED if (pct or 0) >= 80 else BAR
    text = "n/a" if pct is None else f"{pct:g} %"
    return (f"<svg xmlns='http://www.w3.org/2000/svg' class='fill' width='{w + 64}' height='16' role='img' "
            f"aria-label='fill {_e(text)}'><rect x='0' y='2' width='{w}' height='12' fill='#edf2f7' stroke='#cbd5e0'/>"
            f"<rect x='0' y='2' width='{filled:.1f}' height='12' fill='{colour}'/>"
            f"<text x='{w + 6}' y='13' font-size='12' fill='#1a202c'>{_e(text)}</text></svg>")


def sparkline(series: Sequence[float | None]) -> str:
    """A cache's fill over the batches shown (0-100 %, a dashed line at 100 %: full)."""
    w, h = 240, 30
    known = [(i, v) for i, v in enumerate(series) if v is not None]
    step = w / max(len(series) - 1, 1)
    pts = " ".join(f"{i * step:.1f},{h - 2 - min(v, 100.0) / 100.0 * (h - 4):.1f}" for i, v in known)
    dot = ""
    if known:
        i, v = known[-1]
        dot = f"<circle cx='{i * step:.1f}' cy='{h - 2 - min(v, 100.0) / 100.0 * (h - 4):.1f}' r='2.5' fill='{BAR}'/>"
    return (f"<svg xmlns='http://www.w3.org/2000/svg' class='spark' width='{w}' height='{h}' role='img' "
            f"aria-label='fill over the batches shown'>"
            f"<line x1='0' y1='2' x2='{w}' y2='2' stroke='#c53030' stroke-dasharray='3,3'/>"
            f"<polyline points='{pts}' fill='none' stroke='{BAR}' stroke-width='1.5'/>{dot}</svg>")
