"""The Slurm job tab's page and timeline, from records a real Slurm 24.11 gave (the fixtures): what
each state shows, the table of runs, the cancel button and the refresh only when they apply, and
nothing from the cluster or the bucket ever reaching the page unescaped."""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from html.parser import HTMLParser
from typing import Any

import pytest

from airflow_provider_slurmapi.ui.job_view import JobView, build_job_view, utc_text
from airflow_provider_slurmapi.ui.page import (
    OutputExcerpt,
    PageContext,
    content_security_policy,
    render_page,
)
from airflow_provider_slurmapi.ui.timeline import timeline_svg
from tests.unit.test_ui_job_view import NOW, records, requeued_history

ATTACK = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
SVG = "{http://www.w3.org/2000/svg}"


BASE_CONTEXT = PageContext(
    title="train (map index 3)",
    cancel_url="/slurm-job-tab/api/dags/d/runs/r/tasks/train/3/cancel",
    refresh_seconds=30,
    nonce="n0nce",
)


def context(**changes: Any) -> PageContext:
    return replace(BASE_CONTEXT, **changes)


def pending_view(now: float = 1796051431 + 600) -> JobView:
    return build_job_view("5", "a3", records("job_pending_begin_time.json"), [], now)


def running_view() -> JobView:
    live = records("requeue_running_5_running.json")
    accounting = records("slurmdb_requeue_running_5_pending_requeued_running_begintime.json")
    return build_job_view("325", "a3", live, accounting, 1796172763 + 90)


def finished_view() -> JobView:
    return build_job_view("328", "a3", [], records("slurmdb_node_down_requeue_final.json"), NOW)


class Tags(HTMLParser):
    """The page's start tags and their attributes, to count scripts and buttons."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag]


def cancel_buttons(page: str) -> list[dict[str, str | None]]:
    return [attrs for attrs in Tags(page).named("button") if attrs.get("id") == "cancel-job"]


# --- what each state shows ---------------------------------------------------------------------------


def test_a_pending_job_shows_what_it_waits_for_and_when_it_is_expected_to_start() -> None:
    view = pending_view()
    page = render_page(view, context())
    assert '<span class="badge badge-pending">PENDING</span>' in page
    assert "Slurm job 5 on a3" in page
    assert "<dt>Waiting for</dt><dd>BeginTime</dd>" in page
    expected = utc_text(1796055031, "%Y-%m-%d %H:%M")
    assert f"<dt>Expected start</dt><dd>{expected} UTC (in 50 min)</dd>" in page  # submitted + 1 h, seen 10 min in
    assert "BeginTime · 10 min so far" in page  # the run's row
    assert f"Updated {utc_text(view.now, '%H:%M:%S')} UTC" in page


def test_a_pending_job_the_scheduler_has_not_placed_says_so() -> None:
    view = build_job_view("3", "a3", records("job_pending_resources.json"), records("slurmdb_job_pending.json"), NOW)
    page = render_page(view, context())
    assert "<dt>Waiting for</dt><dd>Resources</dd>" in page
    assert "<dt>Expected start</dt><dd>not yet estimated by the scheduler</dd>" in page
    assert "Nothing is allocated to the job yet." in page


def test_a_running_job_shows_where_and_since_when() -> None:
    page = render_page(running_view(), context())
    assert '<span class="badge badge-running">RUNNING</span>' in page
    assert f"<dt>Running on</dt><dd>node1 since {utc_text(1796172763)} UTC (1 min ago)</dd>" in page
    assert "Expected start" not in page


def test_a_finished_job_shows_its_end_and_the_table_of_runs() -> None:
    view = finished_view()
    page = render_page(view, context())
    assert '<span class="badge badge-completed">COMPLETED</span>' in page
    assert f"<dt>Ended</dt><dd>COMPLETED at {utc_text(1796173196)} UTC</dd>" in page
    assert "<dt>Exit code</dt><dd>exit code 0</dd>" in page
    rows = re.findall(r"<tr><th scope=\"row\">(\d+)</th>(.*?)</tr>", page)
    assert [number for number, _ in rows] == ["0", "1"]
    assert ">NODE_FAIL</span>" in rows[0][1] and "a node it ran on failed" in rows[0][1]
    assert "exit code 1" in rows[0][1]
    assert "BeginTime · 2 min" in rows[1][1] and ">COMPLETED</span>" in rows[1][1]
    assert "<dt>Elapsed</dt><dd>5 s</dd>" in page and "Usage (of the last run)" in page


def test_a_failed_job_shows_its_reason() -> None:
    view = build_job_view("8", "a3", records("job_failed.json"), records("slurmdb_job_failed.json"), NOW)
    page = render_page(view, context())
    assert '<span class="badge badge-failed">FAILED</span>' in page
    assert "<dt>Exit code</dt><dd>exit code 3</dd>" in page and "<dt>Reason</dt><dd>NonZeroExitCode</dd>" in page


def test_without_accounting_the_usage_is_not_known_yet() -> None:
    assert "Usage is known once accounting has the job." in render_page(pending_view(), context())


def test_without_a_job_only_the_message_shows() -> None:
    page = render_page(None, context(), f"The Slurm Job API could not be read: {ATTACK}")
    assert f"The Slurm Job API could not be read: {ESCAPED}" in page
    assert "<table" not in page and "<svg" not in page and cancel_buttons(page) == []


# --- the cancel button and the refresh ---------------------------------------------------------------


def test_no_cancel_button_for_a_user_who_may_not_change_the_task() -> None:
    page = render_page(pending_view(), context(cancel_url=None))
    assert cancel_buttons(page) == [] and ">Cancel Slurm job" not in page


def test_a_cancel_button_while_the_job_is_active() -> None:
    url = '/cancel?a=1&b="x"'
    page = render_page(pending_view(), context(cancel_url=url))
    (button,) = cancel_buttons(page)
    assert button["data-url"] == url  # escaped in the page, the same URL for the script
    assert 'data-url="/cancel?a=1&amp;b=&quot;x&quot;"' in page
    assert ">Cancel Slurm job 5</button>" in page
    assert 'id="cancel-result" role="status"' in page


def test_no_cancel_button_once_the_job_ended() -> None:
    assert cancel_buttons(render_page(finished_view(), context())) == []


def test_the_one_script_carries_the_nonce_and_reads_everything_from_the_page() -> None:
    page = render_page(pending_view(), context(nonce="abc123"))
    (script,) = Tags(page).named("script")
    assert script == {"nonce": "abc123"}
    assert page.count("<script") == 1
    body = page.split('<script nonce="abc123">', 1)[1]
    assert "dataset.url" in body and '"X-Requested-By": "slurm-job-tab"' in body
    assert 'document.visibilityState === "visible"' in body


def test_refresh_only_when_asked() -> None:
    page = render_page(pending_view(), context(refresh_seconds=30))
    assert '<body data-refresh-seconds="30">' in page
    assert "Refreshes every 30 s" in page
    quiet = render_page(finished_view(), context(refresh_seconds=None))
    assert "data-refresh-seconds" not in quiet and "Refreshes every" not in quiet
    assert 'id="refresh"' in quiet  # the button still reloads by hand


def test_content_security_policy() -> None:
    assert content_security_policy("abc") == (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; script-src 'nonce-abc'; "
        "connect-src 'self'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
    )


def test_every_script_of_the_page_is_the_one_the_policy_allows() -> None:
    page = render_page(pending_view(), context(nonce="n0nce"))
    scripts = re.findall(r"<script\b[^>]*>", page)
    assert scripts == ['<script nonce="n0nce">']
    policy = dict(directive.split(" ", 1) for directive in content_security_policy("n0nce").split("; "))
    assert policy["script-src"] == "'nonce-n0nce'" and policy["default-src"] == "'none'"
    assert re.search(r"<[^>]*\son[a-z]+=", page) is None  # no inline handler, which the policy would block


def test_no_external_resource() -> None:
    page = render_page(finished_view(), context(output_link="https://console.cloud.google.com/x"))
    assert not re.search(r"(src|href)=\"(?!https://console\.cloud\.google\.com/x)", page)
    assert "@import" not in page and "url(" not in page


# --- nothing from the cluster or the bucket unescaped ------------------------------------------------


def test_hostile_text_from_the_cluster_and_the_bucket_is_escaped() -> None:
    live = copy.deepcopy(records("job_pending_resources.json"))
    live[0]["name"] = ATTACK
    live[0]["state_reason"] = ATTACK
    view = build_job_view("3", f"c{ATTACK}", live, [], NOW)
    output = (
        OutputExcerpt("stdout", f"gs://b/{ATTACK}.out", f"epoch 1\n{ATTACK}\n", problem=f"cut: {ATTACK}"),
        OutputExcerpt("stderr", "gs://b/x.err", "", problem="Not found yet"),
    )
    page = render_page(view, context(title=ATTACK, output=output, nonce='"><b>', cancel_url=f"/c?{ATTACK}"))
    assert ATTACK not in page
    assert page.count("<script") == 1  # the page's own
    assert f"<dt>Waiting for</dt><dd>{ESCAPED}</dd>" in page
    assert f"<pre>epoch 1\n{ESCAPED}\n</pre>" in page
    assert f'<span class="location">gs://b/{ESCAPED}.out</span>' in page
    assert f"cut: {ESCAPED}" in page and "Not found yet" in page
    assert '<script nonce="&quot;&gt;&lt;b&gt;">' in page
    assert "<a " not in page  # a location is text, never a link


@pytest.mark.parametrize("link", ["javascript:alert(1)", "gs://bucket/out", "http://console.cloud.google.com/x"])
def test_only_an_https_output_link_is_shown(link: str) -> None:
    page = render_page(finished_view(), context(output_link=link))
    assert "<a " not in page and link not in page


def test_an_https_output_link_opens_apart() -> None:
    page = render_page(finished_view(), context(output_link="https://console.cloud.google.com/storage?a=1&b=2"))
    (anchor,) = Tags(page).named("a")
    assert anchor["href"] == "https://console.cloud.google.com/storage?a=1&b=2"
    assert anchor["rel"] == "noopener noreferrer"


# --- the timeline ------------------------------------------------------------------------------------


def parsed(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    assert root.tag == f"{SVG}svg" and root.get("role") == "img" and root.get("aria-label")
    assert root.find(f"{SVG}title") is not None
    return root


def lanes(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == "tl-run"]


def test_the_timeline_of_a_requeued_job() -> None:
    root = parsed(timeline_svg(finished_view()))
    assert len(lanes(root)) == 2
    markers = [c.get("class") for c in root.iter(f"{SVG}circle")]
    assert markers == ["tl-end tl-end-failed", "tl-end tl-end-completed"]  # NODE_FAIL, then COMPLETED
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "BeginTime · 2 min" in texts and "Run 0" in texts and "UTC" in texts


def test_the_timeline_of_a_pending_job_marks_the_expected_start_and_now() -> None:
    root = parsed(timeline_svg(pending_view()))
    classes = [element.get("class") for element in root.iter()]
    assert "tl-expected" in classes and "tl-now" in classes and "tl-pending tl-open" in classes
    assert "tl-running" not in " ".join(c or "" for c in classes)


def test_the_timeline_of_a_requeued_run_is_amber() -> None:
    view = build_job_view("325", "a3", [], records("slurmdb_jobs_requeue_running_by_name_duplicates.json"), NOW)
    root = parsed(timeline_svg(view))
    assert [c.get("class") for c in root.iter(f"{SVG}circle")][0] == "tl-end tl-end-requeued"


def test_fifty_runs_fifty_thinner_lanes() -> None:
    view = build_job_view("328", "a3", [], requeued_history(50), NOW)
    root = parsed(timeline_svg(view))
    assert len(lanes(root)) == 50
    assert int(root.get("height") or 0) <= 620
    labels = [t.text for t in root.iter(f"{SVG}text") if (t.text or "").startswith("Run ")]
    assert 0 < len(labels) < 50  # the labels that would overlap are left out
    page = render_page(view, context())
    assert len(re.findall(r'<tr><th scope="row">', page)) == 50  # the table has every run


def test_hostile_text_in_the_timeline_is_escaped() -> None:
    accounting = copy.deepcopy(records("slurmdb_node_down_requeue_final.json"))
    accounting[1]["state"]["reason"] = ATTACK
    accounting[1]["nodes"] = ATTACK
    view = build_job_view("328", "a3", [], accounting, NOW)
    svg = timeline_svg(view)
    assert ATTACK not in svg
    texts = [t.text or "" for t in parsed(svg).iter(f"{SVG}text")] + [
        t.text or "" for t in parsed(svg).iter(f"{SVG}title")
    ]
    assert any(ATTACK in text for text in texts)  # shown, as text


def test_a_job_without_runs_still_draws_well_formed() -> None:
    root = parsed(timeline_svg(build_job_view("1", "a3", [], [], NOW)))
    assert lanes(root) == []


@pytest.mark.parametrize(
    ("days", "tick"), [(0.4, r"\d\d:\d\d"), (3, r"\d\d [A-Z][a-z]{2} \d\d:\d\d"), (30, r"\d\d [A-Z][a-z]{2}")]
)
def test_the_axis_shows_dates_once_it_spans_more_than_a_day(days: float, tick: str) -> None:
    live = records("job_pending_resources.json")
    view = build_job_view("3", "a3", live, [], live[0]["submit_time"]["number"] + days * 86400)
    ticks = [t.text or "" for t in parsed(timeline_svg(view)).iter(f"{SVG}text") if t.get("class") == "tl-tick"]
    assert len(ticks) >= 3 and all(re.fullmatch(tick, text) for text in ticks), ticks
