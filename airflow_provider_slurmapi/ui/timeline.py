"""The job's timeline as an inline SVG: one lane per run on a shared UTC time axis, each with the
time it waited, the time it ran and how it ended.

Colours come from CSS classes (``tl-*``) whose variables the page sets for light and dark; the
fallbacks keep the drawing readable on its own. Every text is escaped: job names, reasons and node
lists come from the cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape as _e  # quotes too: safe in attributes

from airflow_provider_slurmapi.ui.job_view import JobView, Run, duration_text, utc_text

TOP = 16  # room for the "now" label above the lanes
AXIS_HEIGHT = 26
LABEL_WIDTH = 64  # the lane labels' column ("Run 12")
RIGHT_MARGIN = 16
LANES_HEIGHT = 560  # the lanes share this much, so the whole drawing stays near 600 px tall
LANE_MAX, LANE_MIN = 34, 10
LANE_LABEL_SPACING = 13  # px between two lane labels: thinner lanes label every second, third... run
CHAR_WIDTH = 6.4  # an 11 px system font's mean glyph width: whether a label fits its bar
BAR_TEXT_MIN_HEIGHT = 13
TICK_SPACING = 90  # px, at least, between two axis ticks
MINUTE, HOUR, DAY = 60, 3600, 86400
TICK_STEPS = (
    (1, 2, 5, 10, 15, 30)
    + tuple(m * MINUTE for m in (1, 2, 5, 10, 15, 30))
    + tuple(h * HOUR for h in (1, 2, 3, 6, 12))
    + tuple(d * DAY for d in (1, 2, 7, 14, 28, 91, 364))
)
END_KINDS = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "TIMEOUT": "failed",
    "OUT_OF_MEMORY": "failed",
    "NODE_FAIL": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
    "CANCELLED": "cancelled",
    "REVOKED": "cancelled",
    "REQUEUED": "requeued",
    "PREEMPTED": "requeued",
}
STYLE = """
.tl text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;fill:var(--tl-text,#1f2328)}
.tl .tl-label,.tl .tl-tick{fill:var(--tl-muted,#59636e)}
.tl-lane{fill:var(--tl-lane,#f6f8fa)}
.tl-grid{stroke:var(--tl-grid,#d8dee4);stroke-width:1}
.tl-axis{stroke:var(--tl-muted,#59636e);stroke-width:1}
.tl-pending{fill:var(--tl-pending,#d0d7de)}
.tl-projected{fill:none;stroke:var(--tl-pending,#d0d7de);stroke-width:1.5;stroke-dasharray:4 3}
.tl-running{fill:var(--tl-running,#3b7ddd)}
.tl-open{opacity:.8}
.tl .tl-on-pending{fill:var(--tl-on-pending,#1f2328)}
.tl .tl-on-running{fill:var(--tl-on-running,#fff)}
.tl-end{stroke:var(--tl-bg,#fff);stroke-width:1.5}
.tl-end-completed{fill:var(--tl-ok,#1a7f37)}
.tl-end-failed{fill:var(--tl-bad,#cf222e)}
.tl-end-cancelled,.tl-end-other{fill:var(--tl-grey,#6e7781)}
.tl-end-requeued{fill:var(--tl-warn,#bf8700)}
.tl-now{stroke:var(--tl-now,#8250df);stroke-width:1.5}
.tl .tl-now-label{fill:var(--tl-now,#8250df)}
.tl-expected{stroke:var(--tl-warn,#bf8700);stroke-width:1.5;stroke-dasharray:4 3}
"""


@dataclass(frozen=True)
class _Frame:
    """Where time and runs land in the drawing."""

    start: float
    end: float
    left: float
    right: float
    lane: float  # each lane's height

    def x(self, moment: float) -> float:
        return self.left + (moment - self.start) / (self.end - self.start) * (self.right - self.left)

    def lane_top(self, index: int) -> float:
        return TOP + index * self.lane


def timeline_svg(view: JobView, width: int = 900) -> str:
    """The timeline of ``view``'s runs, as one self-contained ``<svg>`` element."""
    lanes = max(len(view.runs), 1)
    lane = max(LANE_MIN, min(LANE_MAX, LANES_HEIGHT / lanes))
    height = math.ceil(TOP + lanes * lane + AXIS_HEIGHT)
    start, end = _time_span(view)
    frame = _Frame(start, end, LABEL_WIDTH, width - RIGHT_MARGIN, lane)
    label = _e(_description(view))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="tl" role="img" aria-label="{label}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{label}</title>",
        f"<style>{STYLE}</style>",
    ]
    parts += _grid(frame, lanes)
    if not view.runs:
        parts.append(f'<text x="{frame.left}" y="{_n(TOP + lane / 2)}" dominant-baseline="middle">No run yet</text>')
    every = math.ceil(LANE_LABEL_SPACING / lane)
    for index, run in enumerate(view.runs):
        parts += _lane(view, frame, index, run, labelled=index % every == 0)
    if view.is_active and view.runs:
        x = _n(frame.x(view.now))
        parts.append(f'<line class="tl-now" x1="{x}" x2="{x}" y1="{TOP - 4}" y2="{_n(TOP + lanes * lane)}"/>')
        parts.append(f'<text class="tl-now-label" x="{x}" y="{TOP - 6}" text-anchor="middle">now</text>')
    parts.append("</svg>")
    return "".join(parts)


def _description(view: JobView) -> str:
    count = len(view.runs)
    runs = f"{count} run{'s' if count != 1 else ''}"
    return f"Timeline of Slurm job {view.job_id}: {runs}, {view.state}"


def _time_span(view: JobView) -> tuple[float, float]:
    """From the first submit to the last end, or to now while the job is active.

    A finished job's axis stops at its end: seen a day later, it would otherwise shrink to a sliver.
    The expected start is kept in view, however far ahead.
    """
    moments: list[float] = [
        moment for run in view.runs for moment in (run.submitted_or_eligible, run.started, run.ended) if moment
    ]
    if view.expected_start is not None:
        moments.append(view.expected_start)
    if view.is_active or not moments:
        moments.append(view.now)
    start, end = min(moments), max(moments)
    end = max(end, start + MINUTE)  # a job of a few seconds still gets a readable axis
    return start, end + (end - start) * 0.02  # room for the last end marker


# --- the axis ------------------------------------------------------------------------------------


def _grid(frame: _Frame, lanes: int) -> list[str]:
    bottom = TOP + lanes * frame.lane
    parts = [
        f'<rect class="tl-lane" x="{frame.left}" y="{_n(frame.lane_top(index))}" '
        f'width="{_n(frame.right - frame.left)}" height="{_n(frame.lane)}"/>'
        for index in range(1, lanes, 2)  # every second lane shaded, so a long lane is easy to follow
    ]
    step = _tick_step(frame)
    pattern = _tick_pattern(frame.end - frame.start, step)
    tick = math.ceil(frame.start / step) * step  # whole steps of UTC (epoch 0 is UTC midnight)
    while tick <= frame.end:
        x = frame.x(tick)
        parts.append(f'<line class="tl-grid" x1="{_n(x)}" x2="{_n(x)}" y1="{TOP}" y2="{_n(bottom + 4)}"/>')
        text = utc_text(tick, pattern)
        half = len(text) * CHAR_WIDTH / 2
        if x - half >= frame.left - 8 and x + half <= frame.right + RIGHT_MARGIN:  # clear of "UTC" and the edge
            parts.append(
                f'<text class="tl-tick" x="{_n(x)}" y="{_n(bottom + 17)}" text-anchor="middle">{_e(text)}</text>'
            )
        tick += step
    parts.append(f'<line class="tl-axis" x1="{frame.left}" x2="{frame.right}" y1="{_n(bottom)}" y2="{_n(bottom)}"/>')
    parts.append(f'<text class="tl-label" x="{LABEL_WIDTH - 8}" y="{_n(bottom + 17)}" text-anchor="end">UTC</text>')
    return parts


def _tick_step(frame: _Frame) -> int:
    most = max(2, int((frame.right - frame.left) / TICK_SPACING))
    span = frame.end - frame.start
    return next((step for step in TICK_STEPS if span / step <= most), TICK_STEPS[-1])


def _tick_pattern(span: float, step: int) -> str:
    if span > DAY:
        return "%d %b" if step >= DAY else "%d %b %H:%M"
    return "%H:%M:%S" if step < MINUTE else "%H:%M"


# --- one run -------------------------------------------------------------------------------------


def _lane(view: JobView, frame: _Frame, index: int, run: Run, *, labelled: bool) -> list[str]:
    top = frame.lane_top(index)
    bar = max(6.0, frame.lane * 0.64)
    bar_top = top + (frame.lane - bar) / 2
    middle = top + frame.lane / 2
    parts = ['<g class="tl-run">']
    if labelled:
        parts.append(
            f'<text class="tl-label" x="{LABEL_WIDTH - 8}" y="{_n(middle)}" text-anchor="end" '
            f'dominant-baseline="middle">Run {run.number}</text>'
        )
    waited_from, waited_until = run.submitted_or_eligible, run.waited_until(view.now)
    if waited_from is not None and waited_until is not None:
        waited = duration_text(waited_until - waited_from)
        reason = run.pending_reason or "waiting"
        parts.append(
            _segment(
                frame,
                waited_from,
                waited_until,
                bar_top,
                bar,
                css="tl-pending" + (" tl-open" if not run.is_over and run.started is None else ""),
                text=f"{reason} · {waited}",
                text_css="tl-on-pending",
                tooltip=f"Run {run.number} waited {waited} for {reason}",
            )
        )
    if view.expected_start is not None and run is view.current_run and run.started is None:
        parts += _expected_start(frame, view.expected_start, view.now, top, bar_top, bar)
    ran_until = run.ran_until(view.now)
    if run.started is not None and ran_until is not None:
        ran = duration_text(ran_until - run.started)
        where = run.nodes or "no node"
        parts.append(
            _segment(
                frame,
                run.started,
                ran_until,
                bar_top,
                bar,
                css="tl-running" + ("" if run.is_over else " tl-open"),
                text=f"{where} · {ran}",
                text_css="tl-on-running",
                tooltip=f"Run {run.number} ran {ran} on {where}",
            )
        )
    if run.end_state is not None and run.ended is not None:
        parts.append(_end_marker(frame, run, run.end_state, run.ended, middle, bar))
    parts.append("</g>")
    return parts


def _segment(
    frame: _Frame,
    start: float,
    end: float,
    top: float,
    height: float,
    *,
    css: str,
    text: str,
    text_css: str,
    tooltip: str,
) -> str:
    x = frame.x(start)
    width = max(1.0, frame.x(end) - x)  # a moment's segment still shows
    shape = (
        f'<rect class="{css}" x="{_n(x)}" y="{_n(top)}" width="{_n(width)}" height="{_n(height)}" rx="2">'
        f"<title>{_e(tooltip)}</title></rect>"
    )
    if height < BAR_TEXT_MIN_HEIGHT or len(text) * CHAR_WIDTH + 8 > width:
        return shape  # the label would not fit: the tooltip and the table of runs still say it
    return (
        shape + f'<text class="{text_css}" x="{_n(x + 4)}" y="{_n(top + height / 2)}" '
        f'dominant-baseline="middle">{_e(text)}</text>'
    )


def _expected_start(frame: _Frame, expected: int, now: float, top: float, bar_top: float, bar: float) -> list[str]:
    x = frame.x(expected)
    tooltip = _e(f"Expected start {utc_text(expected)} UTC")
    parts = []
    if expected > now:  # the wait still ahead, as the scheduler sees it
        parts.append(
            f'<rect class="tl-projected" x="{_n(frame.x(now))}" y="{_n(bar_top)}" '
            f'width="{_n(x - frame.x(now))}" height="{_n(bar)}"><title>{tooltip}</title></rect>'
        )
    parts.append(
        f'<line class="tl-expected" x1="{_n(x)}" x2="{_n(x)}" y1="{_n(top + 1)}" y2="{_n(top + frame.lane - 1)}">'
        f"<title>{tooltip}</title></line>"
    )
    label = "expected start"
    if bar >= BAR_TEXT_MIN_HEIGHT:
        fits_right = x + 4 + len(label) * CHAR_WIDTH <= frame.right
        anchor, at = ("start", x + 4) if fits_right else ("end", x - 4)
        parts.append(
            f'<text class="tl-label" x="{_n(at)}" y="{_n(bar_top + bar / 2)}" text-anchor="{anchor}" '
            f'dominant-baseline="middle">{_e(label)}</text>'
        )
    return parts


def _end_marker(frame: _Frame, run: Run, end_state: str, ended: int, middle: float, bar: float) -> str:
    details = [f"Run {run.number} ended {end_state} at {utc_text(ended)} UTC"]
    details += [text for text in (run.exit_code, run.end_reason) if text]
    radius = min(5.0, bar / 2 + 1)
    return (
        f'<circle class="tl-end tl-end-{end_kind(end_state)}" cx="{_n(frame.x(ended))}" cy="{_n(middle)}" '
        f'r="{_n(radius)}">'
        f"<title>{_e('; '.join(details))}</title></circle>"
    )


def end_kind(end_state: str) -> str:
    """The colour family of an end: completed, failed, cancelled, requeued or other."""
    return END_KINDS.get(end_state, "other")


def _n(value: float) -> str:
    """A coordinate, to a tenth of a pixel: enough, and keeps 50 lanes' SVG small."""
    return f"{value:.1f}".rstrip("0").rstrip(".")
