"""The Slurm job tab's page, whole: rendered on the server, shown in an iframe of the task instance
page.

Everything it shows of the job came from the cluster or the bucket, so every text and attribute is
escaped, and the page's one script is constant: it reads what it needs (the cancel URL, the refresh
period) from ``data-`` attributes. No external resource: the policy of
``content_security_policy`` allows none.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape as _e  # quotes too: safe in attributes

from airflow_provider_slurmapi.ui.job_view import JobView, Run, duration_text, utc_text
from airflow_provider_slurmapi.ui.timeline import end_kind, timeline_svg

TIMELINE_WIDTH = 900  # the SVG scales down with the frame; its text stays legible at this width
ACTIVE_BADGES = {"PENDING": "pending", "RUNNING": "running"}


@dataclass(frozen=True)
class OutputExcerpt:
    """The last lines of one output stream of the job."""

    stream: str  # "stdout" / "stderr"
    location: str  # where it was read (gs://...): shown as text, never as a link
    text: str  # the last lines
    problem: str | None = None  # why nothing, or not everything, could be shown


@dataclass(frozen=True)
class PageContext:
    """What the page needs beyond the job: the task instance, what the user may do, the CSP nonce."""

    title: str  # the task instance, e.g. "train (map index 3)"
    cancel_url: str | None  # None: the user may not change this task instance, so no cancel button
    refresh_seconds: int | None  # None: no automatic refresh (the job ended)
    nonce: str  # the CSP nonce of the page's one inline script
    output: tuple[OutputExcerpt, ...] = ()
    output_link: str | None = None  # the output in the Cloud console; only an https:// one is shown


def content_security_policy(nonce: str) -> str:
    """The page's Content-Security-Policy: its own inline style and its one script, nothing else."""
    return (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        f"script-src 'nonce-{nonce}'; connect-src 'self'; frame-ancestors 'self'; base-uri 'none'; "
        "form-action 'none'"
    )


def render_page(view: JobView | None, context: PageContext, message: str | None = None) -> str:
    """The page of ``view``; without a view, only ``message`` (no job submitted, the API unread...)."""
    if view is None:
        body = [_context_line(context), _toolbar(None, context)]
        body.append(f'<p class="notice">{_e(message or "There is no Slurm job to show.")}</p>')
        title = "Slurm job"
    else:
        body = [_context_line(context), _header(view), _toolbar(view, context)]
        if message:
            body.append(f'<p class="notice">{_e(message)}</p>')
        body += [
            _status(view),
            _timeline(view),
            _runs_table(view),
            _usage(view),
            _output(context),
            _cancel(view, context),
        ]
        title = f"Slurm job {view.job_id}"
    refresh = f' data-refresh-seconds="{int(context.refresh_seconds)}"' if context.refresh_seconds else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head>"
        f"<body{refresh}>{''.join(part for part in body if part)}"
        f'<script nonce="{_e(context.nonce)}">{SCRIPT}</script></body></html>'
    )


# --- the sections, in the page's order -----------------------------------------------------------


def _context_line(context: PageContext) -> str:
    return f'<p class="context">{_e(context.title)}</p>' if context.title else ""


def _header(view: JobView) -> str:
    name = f' <span class="name">{_e(view.name)}</span>' if view.name else ""
    flags = f' <span class="flags">{_e(", ".join(view.flags))}</span>' if view.flags else ""
    return (
        f"<header><h1>Slurm job {_e(view.job_id)} on {_e(view.cluster)}{name}</h1>"
        f'<span class="badge badge-{_badge(view.state)}">{_e(view.state)}</span>{flags}</header>'
    )


def _badge(state: str) -> str:
    return ACTIVE_BADGES.get(state) or end_kind(state)


def _toolbar(view: JobView | None, context: PageContext) -> str:
    parts = ['<div class="toolbar">']
    if view is not None:
        parts.append(f"<span>Updated {_e(utc_text(view.now, '%H:%M:%S'))} UTC</span>")
    if context.refresh_seconds:
        parts.append(f"<span>Refreshes every {int(context.refresh_seconds)} s while this tab is shown</span>")
    parts.append('<button type="button" id="refresh">Refresh</button></div>')
    return "".join(parts)


def _status(view: JobView) -> str:
    facts: list[tuple[str, str]] = []
    current = view.current_run
    if view.state == "PENDING":
        facts.append(("Waiting for", view.reason or "no reason given by the scheduler yet"))
        facts.append(("Expected start", _expected_start(view)))
    elif view.state == "RUNNING" and current is not None and current.started is not None:
        since = f"{utc_text(current.started)} UTC ({duration_text(view.now - current.started)} ago)"
        facts.append(("Running on", f"{view.nodes or 'no node'} since {since}"))
    elif not view.is_active and view.runs:
        ended = f" at {utc_text(current.ended)} UTC" if current is not None and current.ended else ""
        facts.append(("Ended", f"{view.state}{ended}"))
        facts.append(("Exit code", view.exit_code or "none reported"))
        if view.reason:
            facts.append(("Reason", view.reason))
    rows = "".join(f"<dt>{_e(label)}</dt><dd>{_e(value)}</dd>" for label, value in facts)
    listed = f'<dl class="facts">{rows}</dl>' if rows else ""
    return f'<p class="summary">{_e(view.summary)}</p>{listed}'


def _expected_start(view: JobView) -> str:
    if view.held:
        return "none while the job is held: it starts only once released"
    if view.expected_start is None:
        return "not yet estimated by the scheduler"
    ahead = view.expected_start - view.now
    when = f"in {duration_text(ahead)}" if ahead >= 1 else "due now"
    return f"{utc_text(view.expected_start, '%Y-%m-%d %H:%M')} UTC ({when})"


def _timeline(view: JobView) -> str:
    if not view.runs:
        return ""
    return f'<section><h2>Timeline</h2><div class="timeline">{timeline_svg(view, TIMELINE_WIDTH)}</div></section>'


def _runs_table(view: JobView) -> str:
    if not view.runs:
        return ""
    head = "".join(
        f'<th scope="col">{label}</th>'
        for label in ("Run", "Waited for", "Started", "Ended", "Nodes", "End state", "Exit code")
    )
    rows = "".join(_run_row(run, view.now) for run in view.runs)
    return (
        '<section><h2>Runs</h2><table class="runs"><caption>Each run of the job, times in UTC '
        "(Slurm keeps the job ID when it requeues it)</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _run_row(run: Run, now: float) -> str:
    waited_until = run.waited_until(now)
    waited = "—"
    if run.submitted_or_eligible is not None and waited_until is not None:
        so_far = " so far" if not run.is_over and run.started is None else ""
        waited = f"{duration_text(waited_until - run.submitted_or_eligible)}{so_far}"
        waited = f"{run.pending_reason} · {waited}" if run.pending_reason else waited
    end_state = (
        "" if run.end_state is None else f'<span class="end end-{end_kind(run.end_state)}">{_e(run.end_state)}</span>'
    )
    if run.end_reason:
        end_state += f' <span class="muted">{_e(run.end_reason)}</span>'
    cells = [
        f'<th scope="row">{run.number}</th>',
        f"<td>{_e(waited)}</td>",
        f'<td class="when">{_e(_time(run.started))}</td>',
        f'<td class="when">{_e(_time(run.ended))}</td>',
        f"<td>{_e(run.nodes or '—')}</td>",
        f"<td>{end_state or _e('running' if run.started else '—')}</td>",
        f'<td class="when">{_e(run.exit_code or "—")}</td>',
    ]
    return f"<tr>{''.join(cells)}</tr>"


def _time(moment: int | None) -> str:
    return utc_text(moment) if moment is not None else "—"


def _usage(view: JobView) -> str:
    usage = view.usage
    if usage is None:
        return '<section><h2>Usage</h2><p class="muted">Usage is known once accounting has the job.</p></section>'
    if not (usage.nodes or usage.cpus or usage.elapsed_seconds):  # accounting's record of a run not started
        return '<section><h2>Usage</h2><p class="muted">Nothing is allocated to the job yet.</p></section>'
    facts = [
        ("Elapsed", duration_text(usage.elapsed_seconds)),
        ("Nodes", str(usage.nodes)),
        ("CPUs", str(usage.cpus)),
        ("GPUs", str(usage.gpus)),
        ("GPU-hours", f"{usage.gpu_hours:g}"),
    ]
    rows = "".join(f"<dt>{label}</dt><dd>{_e(value)}</dd>" for label, value in facts)
    note = " (of the last run)" if len(view.runs) > 1 else ""
    return f'<section><h2>Usage{note}</h2><dl class="facts usage">{rows}</dl></section>'


def _output(context: PageContext) -> str:
    if not context.output and not context.output_link:
        return ""
    parts = ["<section><h2>Output</h2>"]
    for excerpt in context.output:
        parts.append(f'<h3>{_e(excerpt.stream)} <span class="location">{_e(excerpt.location)}</span></h3>')
        if excerpt.problem:
            parts.append(f'<p class="problem">{_e(excerpt.problem)}</p>')
        if excerpt.text:
            parts.append(f"<pre>{_e(excerpt.text)}</pre>")
        elif not excerpt.problem:
            parts.append('<p class="muted">Empty.</p>')
    link = context.output_link
    if link and link.startswith("https://"):  # never javascript:, data: or a gs:// the browser cannot open
        parts.append(
            f'<p><a href="{_e(link)}" target="_blank" rel="noopener noreferrer">'
            "Open the output in the Cloud console</a></p>"
        )
    parts.append("</section>")
    return "".join(parts)


def _cancel(view: JobView, context: PageContext) -> str:
    if not context.cancel_url or not view.is_active:
        return ""
    return (
        '<section class="actions">'
        f'<button type="button" id="cancel-job" class="danger" data-url="{_e(context.cancel_url)}" '
        f'data-job-id="{_e(view.job_id)}">Cancel Slurm job {_e(view.job_id)}</button>'
        # asked in the page: Airflow's frame allows no dialogs (its sandbox has no allow-modals)
        f'<span id="cancel-confirm" hidden> Slurm stops job {_e(view.job_id)} now; this cannot be undone. '
        f'<button type="button" id="cancel-yes" class="danger">Yes, cancel job {_e(view.job_id)}</button> '
        '<button type="button" id="cancel-no">Keep it running</button></span>'
        '<p id="cancel-result" role="status" aria-live="polite"></p></section>'
    )


# --- the constant style and script -----------------------------------------------------------------

STYLE = """
:root{color-scheme:light dark;--fg:#1f2328;--muted:#59636e;--bg:#fff;--panel:#f6f8fa;--line:#d1d9e0;
--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--grey:#6e7781;--accent:#0969da;
--tl-text:var(--fg);--tl-muted:var(--muted);--tl-bg:var(--bg);--tl-lane:var(--panel);--tl-grid:#e1e6eb;
--tl-pending:#d0d7de;--tl-on-pending:#1f2328;--tl-running:#3b7ddd;--tl-on-running:#fff;--tl-ok:var(--ok);
--tl-bad:var(--bad);--tl-grey:var(--grey);--tl-warn:#bf8700;--tl-now:#8250df}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#9198a1;--bg:#0d1117;--panel:#151b23;
--line:#3d444d;--ok:#3fb950;--bad:#f85149;--warn:#d29922;--grey:#9198a1;--accent:#4493f8;--tl-grid:#262c36;
--tl-pending:#3d444d;--tl-on-pending:#e6edf3;--tl-running:#2f6fcc;--tl-on-running:#fff;--tl-warn:#d29922;
--tl-now:#ab7df8}}
*{box-sizing:border-box}
body{margin:0;padding:12px 16px 24px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:var(--bg)}
h1{font-size:18px;margin:0;font-weight:600}
h2{font-size:15px;margin:20px 0 8px;font-weight:600}
h3{font-size:13px;margin:12px 0 4px;font-weight:600}
.context,.muted,.location,.name,.flags,caption{color:var(--muted)}
.context{margin:0 0 4px;font-size:12px}
.name{font-weight:400}
.location{font-weight:400;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;
overflow-wrap:anywhere}
header{display:flex;flex-wrap:wrap;align-items:center;gap:8px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff;
background:var(--grey)}
.badge-pending{background:var(--warn)}.badge-running{background:var(--accent)}.badge-completed{background:var(--ok)}
.badge-failed{background:var(--bad)}.badge-requeued{background:var(--warn)}
.toolbar{display:flex;flex-wrap:wrap;align-items:center;gap:12px;margin:6px 0;font-size:12px;color:var(--muted)}
.summary{margin:8px 0;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;
overflow-wrap:anywhere}
.notice{padding:8px 12px;border:1px solid var(--line);border-left:4px solid var(--warn);background:var(--panel);
border-radius:4px}
.problem{color:var(--bad);margin:4px 0}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:8px 0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;overflow-wrap:anywhere}
.timeline{overflow-x:auto}
.timeline svg{max-width:100%;height:auto;display:block}
table.runs{border-collapse:collapse;width:100%;font-size:13px}
table.runs caption{text-align:left;font-size:12px;padding-bottom:4px}
table.runs th,table.runs td{text-align:left;padding:3px 8px;border-bottom:1px solid var(--line);
vertical-align:top}
table.runs thead th{font-weight:600;border-bottom-width:2px}
table.runs tbody th{font-weight:400}
table.runs .when{white-space:nowrap}
.end{font-weight:600}.end-completed{color:var(--ok)}.end-failed{color:var(--bad)}.end-requeued{color:var(--warn)}
.end-cancelled,.end-other{color:var(--grey)}
pre{margin:4px 0;padding:8px;max-height:320px;overflow:auto;background:var(--panel);border:1px solid var(--line);
border-radius:4px;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre-wrap;
overflow-wrap:anywhere}
a{color:var(--accent)}
button{font:inherit;font-size:13px;padding:3px 12px;border-radius:6px;border:1px solid var(--line);
background:var(--panel);color:var(--fg);cursor:pointer}
button:disabled{opacity:.6;cursor:default}
button.danger{color:var(--bad);border-color:var(--bad)}
.actions{margin-top:20px}
#cancel-result{min-height:1.4em;margin:6px 0}
"""

# Constant: nothing of the job is written into it, what it needs is read from data- attributes.
SCRIPT = """
(() => {
  "use strict";
  const reload = () => window.location.reload();
  const refreshButton = document.getElementById("refresh");
  if (refreshButton) refreshButton.addEventListener("click", reload);

  // A hidden tab does not poll: a refresh that falls due while hidden waits until it is shown.
  // Nor does it reload while the user is asked to confirm a cancel.
  let confirming = false;
  const refreshSeconds = Number(document.body.dataset.refreshSeconds || 0);
  if (refreshSeconds > 0) {
    let due = false;
    window.setInterval(() => {
      if (document.visibilityState === "visible" && !confirming) reload();
      else due = true;
    }, refreshSeconds * 1000);
    document.addEventListener("visibilitychange", () => {
      if (due && document.visibilityState === "visible" && !confirming) reload();
    });
  }

  const cancel = document.getElementById("cancel-job");
  const confirmation = document.getElementById("cancel-confirm");
  const yes = document.getElementById("cancel-yes");
  const no = document.getElementById("cancel-no");
  const result = document.getElementById("cancel-result");
  if (!cancel || !confirmation || !yes || !no || !result) return;
  const ask = (shown) => {
    confirming = shown;
    confirmation.hidden = !shown;
    cancel.disabled = shown;
  };
  cancel.addEventListener("click", () => ask(true));
  no.addEventListener("click", () => ask(false));
  yes.addEventListener("click", async () => {
    yes.disabled = no.disabled = true;
    result.textContent = "Cancelling…";
    try {
      const response = await fetch(cancel.dataset.url, {
        method: "POST",
        headers: {"Content-Type": "application/json", "X-Requested-By": "slurm-job-tab"},
        body: "{}",
        credentials: "same-origin",
      });
      let text = `${response.status} ${response.statusText}`.trim();
      try {
        const answer = await response.json();
        if (answer && typeof answer.message === "string") text = answer.message;
        else if (answer && typeof answer.detail === "string") text = answer.detail;
      } catch (error) {
        // not JSON: the HTTP status says it
      }
      result.textContent = response.ok ? text : `The cancel failed: ${text}`;
    } catch (error) {
      result.textContent = `The cancel failed: ${error}`;
    }
    window.setTimeout(reload, 2000);
  });
})();
"""
