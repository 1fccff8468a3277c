"""What a pending job's live output costs the listing of a busy ``live/`` folder: one trigger
following the live output of a job that waits in the queue (no piece yet), the folder empty or
holding a million older pieces of other jobs.

A ``SlurmJobTrigger`` with ``live_output`` set, its spec made as the operator makes it at
submission, waits for a job that pends (a ``begin_time`` an hour away) in the emulator
(``--virtual-jobs``), for ``--listings`` listings of the folder. The folder is a listing stand-in:
a Cloud Storage JSON API that serves synthetic names in sorted order, honouring ``prefix``,
``startOffset``, ``pageToken``, ``maxResults`` (at most 1,000 names a page, as Cloud Storage) and
``fields``, without storing a million objects; what is measured is what the provider asks for and
what it is given. The older pieces were published over the hours before the job was submitted, up
to 10 minutes before it, ten a second.

Counted per listing (one per poll interval): the names it returned, its pages (storage requests),
the bytes of the responses, and its time (``ObjectStore.names_from``, in the listing's thread). Each
configuration runs in a fresh process; the provider of this tree and the one committed at
``--baseline-ref`` (5bd9020, before the listing fix) in the same run.

    python -m benchmarks.live_output_listing                  # 1,000,000 older pieces, 3 listings at a 10 s interval
    python -m benchmarks.live_output_listing --quick          # 10,000 older pieces, 3 listings at a 1 s interval
    python -m benchmarks.live_output_listing --older 100000 --listings 5
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

from benchmarks.common import (
    machine_line,
    markdown_table,
    provider_at,
    stand_in_server,
    use_private_airflow_home,
)
from benchmarks.triggerer_scale import start_emulator
from tests.unit.task_fakes import FakeVariables

BASELINE_REF = "5bd9020"  # the provider before the listing fix
BUCKET = "slurm-output"
URI = f"gs://{BUCKET}/bench"
PREFIX = "bench/live/"
PAGE = 1000
PER_SECOND = 10  # older pieces published a second
BEFORE_SUBMISSION = 600  # the last older piece, seconds before the job's submission


# --- the listing stand-in ----------------------------------------------------------------------


class OlderPieces:
    """``count`` piece names, in name order, made from their index (none stored): ten a second, of
    ten other jobs, ending ``BEFORE_SUBMISSION`` seconds before ``now``."""

    def __init__(self, count: int, now: float) -> None:
        self.count = count
        self.first = int(now) - BEFORE_SUBMISSION - count // PER_SECOND

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> str:
        second, job = divmod(index, PER_SECOND)
        return f"{self.first + second:010d}-{700000 + job}-0badcafe-0-out-{second % 1000000:06d}"


def serve_listings(port: int, count: int, now: float) -> None:
    names = OlderPieces(count, now)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (the library's name)
            parts = urlsplit(self.path)
            if parts.path == f"/storage/v1/b/{BUCKET}":
                return self.answer(200, {"kind": "storage#bucket", "id": BUCKET, "name": BUCKET})
            if parts.path != f"/storage/v1/b/{BUCKET}/o":  # the bucket and its listings are all it serves
                return self.answer(404, {"error": {"code": 404, "message": "No such object."}})
            query = {key: values[0] for key, values in parse_qs(parts.query).items()}
            prefix = unquote(query.get("prefix", ""))
            if prefix != PREFIX:
                return self.answer(200, {"kind": "storage#objects"})
            start = query.get("startOffset", "").removeprefix(PREFIX)
            after = query.get("pageToken", "")
            at = max(bisect.bisect_left(names, start), bisect.bisect_right(names, after) if after else 0)
            limit = min(int(query.get("maxResults", PAGE)), PAGE)
            page = [names[i] for i in range(at, min(at + limit, len(names)))]
            partial = query.get("fields", "").startswith("items(name)")
            body: dict[str, Any] = {} if partial else {"kind": "storage#objects"}
            if page:
                body["items"] = [{"name": PREFIX + name} if partial else self.resource(name) for name in page]
            if at + limit < len(names):
                body["nextPageToken"] = page[-1]
            self.answer(200, body)

        def resource(self, name: str) -> dict[str, Any]:
            """An object's metadata, as Cloud Storage gives it when no ``fields`` are asked for."""
            when = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(int(name[:10])))
            return {
                "kind": "storage#object", "id": f"{BUCKET}/{PREFIX}{name}/1", "name": PREFIX + name,
                "bucket": BUCKET, "generation": "1", "metageneration": "1", "contentType": "text/plain",
                "storageClass": "STANDARD", "size": "512", "md5Hash": "1B2M2Y8AsgTpgAmY7PhCfg==",
                "crc32c": "AAAAAA==", "etag": "CAE=", "timeCreated": when, "updated": when,
            }  # fmt: skip

        def answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


# --- one configuration, in its own process ------------------------------------------------------


def operator_spec(job_id: str, submitted_at: float) -> dict[str, Any]:
    """The trigger's ``live_output``, as the operator of this provider makes it once it submitted
    the job (``SlurmJobOperator._live_reader``): a follower from the job's submission where the
    provider has one, else a new follower."""
    from airflow_provider_slurmapi.client.live_output import LiveFollower, LiveOutputSettings, folder_tag
    from airflow_provider_slurmapi.hooks.live_reader import LiveOutputReader

    folder = f"{URI}/bench__try1__0"
    if hasattr(LiveFollower, "from_submission"):
        follower = LiveFollower.from_submission(job_id, folder_tag(folder), submitted_at)
    else:
        follower = LiveFollower(job=job_id, tag=folder_tag(folder))
    reader = LiveOutputReader(cast("Any", None), URI, LiveOutputSettings(), follower, folder)
    return dict(reader.trigger_spec())


async def follow(job_id: str, submitted_at: float, interval: float, listings: int) -> dict[str, Any]:
    import requests

    from airflow_provider_slurmapi.hooks.object_store import ObjectStore
    from airflow_provider_slurmapi.triggers import live_output as live_triggers
    from airflow_provider_slurmapi.triggers.job import SlurmJobTrigger

    variables = FakeVariables()  # the triggers' positions: in memory, no database
    live_triggers._variables = lambda: variables  # type: ignore[attr-defined]
    made: list[dict[str, Any]] = []  # per listing: offset, names, time, pages, bytes
    requests_made: list[tuple[int, bool, int]] = []  # each storage request's thread, whether a page, response bytes
    names_from, request = ObjectStore.names_from, requests.Session.request
    done = asyncio.Event()

    def counted_names_from(store: ObjectStore, folder: str, offset: str, *args: Any, **kwargs: Any) -> list[str]:
        before, started = len(requests_made), time.perf_counter()
        names = names_from(store, folder, offset, *args, **kwargs)
        seconds, thread = time.perf_counter() - started, threading.get_ident()
        its = [(page, size) for made_in, page, size in requests_made[before:] if made_in == thread]
        made.append(
            {"offset": offset, "names": len(names), "seconds": seconds,
             "pages": sum(page for page, _ in its), "bytes": sum(size for _, size in its)}
        )  # fmt: skip
        if len(made) >= listings:
            loop.call_soon_threadsafe(done.set)
        return names

    def counted_request(session: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        response = request(session, method, url, *args, **kwargs)
        if "/storage/v1/b/" in url:  # not the credentials' token requests
            page = urlsplit(url).path.endswith("/o")
            requests_made.append((threading.get_ident(), page, len(response.content)))
        return response

    setattr(ObjectStore, "names_from", counted_names_from)  # noqa: B010
    setattr(requests.Session, "request", counted_request)  # noqa: B010
    loop = asyncio.get_running_loop()
    trigger = SlurmJobTrigger(
        job_id, poll_interval=interval, lost_grace=600, live_output=operator_spec(job_id, submitted_at)
    )
    events = trigger.run()
    waiting = asyncio.ensure_future(events.__anext__())
    stop = asyncio.ensure_future(done.wait())
    finished, _ = await asyncio.wait({waiting, stop}, timeout=3600, return_when=asyncio.FIRST_COMPLETED)
    if waiting in finished:
        raise RuntimeError(f"the pending job's trigger ended: {waiting.result()}")
    waiting.cancel()  # the triggerer stops the trigger
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    with contextlib.suppress(Exception):
        await events.aclose()
    stop.cancel()
    measured = made[:listings]
    return {
        "listings": len(measured),
        "names": statistics.mean(m["names"] for m in measured),
        "pages": statistics.mean(m["pages"] for m in measured),
        "bytes": statistics.mean(m["bytes"] for m in measured),
        "seconds": statistics.median(m["seconds"] for m in measured),
        "offset_before_submission": submitted_at - int(measured[-1]["offset"] or 0),
    }


def run_configuration(interval: float, listings: int) -> dict[str, Any]:
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

    hook = SlurmJobApiHook()
    job: dict[str, Any] = {"name": "bench", "current_working_directory": "/tmp", "environment": ["PATH=/usr/bin:/bin"]}
    job["begin_time"] = {"set": True, "number": int(time.time()) + 3600}  # pends, as a job waiting for GPUs
    submitted_at = time.time()
    job_id = hook.submit_job(job, "#!/bin/bash\ntrue\n")
    return asyncio.run(follow(job_id, submitted_at, interval, listings))


# --- the driver ---------------------------------------------------------------------------------


def measure(ref: str | None, older: int, interval: float, listings: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-live-listing-") as work,
        provider_at(ref) as root,
        stand_in_server("benchmarks.live_output_listing", str(older)) as storage,
    ):
        emulator, connection = start_emulator(Path(work))
        try:
            conn = json.loads(connection)
            conn["extra"]["output_uri"] = URI
            env = {**os.environ, "AIRFLOW_CONN_SLURM_JOB_API_DEFAULT": json.dumps(conn)}
            env["STORAGE_EMULATOR_HOST"] = storage
            result = subprocess.run(
                [sys.executable, "-m", "benchmarks.live_output_listing", "--child", str(interval), str(listings)],
                env=env, cwd=root, capture_output=True, text=True, check=False,
            )  # fmt: skip
        finally:
            emulator.terminate()
            emulator.wait(30)
    if result.returncode != 0:
        raise RuntimeError(
            f"measuring {ref or 'this tree'} with {older:,} older pieces failed:\n{result.stderr[-3000:]}"
        )
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def listed_from(before_submission: float) -> str:
    return "the folder's start" if before_submission > 10 * 365 * 86400 else f"{before_submission:,.0f}"


def times(value: float, empty: float) -> str:
    return f"x{value / empty:.2f}" if empty else ("x1.00" if value == 0 else "-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 older pieces at a 1 s interval, for CI")
    parser.add_argument("--older", type=int, default=None, help="older pieces in the folder (default 1,000,000)")
    parser.add_argument("--listings", type=int, default=3, help="listings measured per configuration (default 3)")
    parser.add_argument("--interval", type=float, default=None, help="poll interval, seconds (default 10)")
    parser.add_argument(
        "--baseline-ref", default=BASELINE_REF, help=f"the commit the baseline measures (default {BASELINE_REF})"
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--stand-in", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stand_in:
        serve_listings(args.stand_in[0], args.stand_in[1], time.time())
        return
    use_private_airflow_home()
    if args.child:
        print(json.dumps(run_configuration(float(args.child[0]), int(args.child[1]))))
        return
    older = args.older if args.older is not None else (10_000 if args.quick else 1_000_000)
    interval = args.interval or (1.0 if args.quick else 10.0)
    rows = []
    for label, ref in ((f"baseline, {args.baseline_ref}", args.baseline_ref), ("this tree", None)):
        empty = measure(ref, 0, interval, args.listings)
        busy = measure(ref, older, interval, args.listings)
        print(f"measured {label}: empty {empty}, busy {busy}", file=sys.stderr, flush=True)
        for count, figures in ((0, empty), (older, busy)):
            rows.append(
                [
                    label,
                    f"{count:,}",
                    f"{figures['listings']}",
                    f"{figures['names']:,.0f}",
                    f"{figures['pages']:,.1f}",
                    f"{figures['bytes']:,.0f}",
                    f"{figures['seconds'] * 1000:,.1f}",
                    "-" if figures is empty else " / ".join(
                        times(figures[k], empty[k]) for k in ("pages", "bytes", "seconds")
                    ),
                    listed_from(figures["offset_before_submission"]),
                ]
            )  # fmt: skip
    headers = [
        "provider", "older pieces in live/", "listings", "names per listing", "pages per listing",
        "response bytes per listing", "listing time, median (ms)", "x empty folder (pages / bytes / time)",
        "listed from (s before submission)",
    ]  # fmt: skip
    print(
        f"A pending job's live output: one trigger, one listing per {interval:g} s interval, {args.listings} listings"
        f" measured; older pieces published up to {BEFORE_SUBMISSION} s before the job's submission\n"
    )
    print(markdown_table(headers, rows))
    print()
    print(machine_line())


if __name__ == "__main__":
    main()
