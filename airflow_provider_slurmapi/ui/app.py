"""The Slurm job tab's FastAPI app, which Airflow 3.1+'s api-server mounts under ``/slurm-job``.

Every endpoint goes through the api-server's own authentication (its token, from the
``Authorization`` header or the UI's cookie) and authorisation, per DAG: the tab and its JSON need
what reading the task's log needs (they show the job's output), a cancel needs what changing the
task instance needs. A cancel also needs a JSON body and the ``X-Requested-By`` header, which a
page of another site cannot send without the api-server's consent (CORS).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Annotated, Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from airflow_provider_slurmapi.client.errors import JobNotFoundError, SlurmJobApiError
from airflow_provider_slurmapi.client.output import job_lines, visible
from airflow_provider_slurmapi.ui.job_view import JobView, build_job_view
from airflow_provider_slurmapi.ui.page import OutputExcerpt, PageContext, content_security_policy, render_page
from airflow_provider_slurmapi.ui.task_job import JobReading, TaskJob, find_task_job, forget, hook_for, read_task_job

log = logging.getLogger(__name__)

REFRESH_SECONDS = 15  # an open tab on an active job reads it again this often, while it is visible
CANCEL_HEADER = "X-Requested-By"
may_read_logs = requires_access_dag("GET", DagAccessEntity.TASK_LOGS)
may_change = requires_access_dag("PUT", DagAccessEntity.TASK_INSTANCE)


def _map_index(map_index: str) -> int:
    # the UI leaves {MAP_INDEX} as it is for a task that is not mapped
    try:
        return int(map_index)
    except ValueError:
        return -1


@dataclass(frozen=True)
class TaskInstanceRef:
    """The task instance a request is about."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int

    def task_job(self) -> TaskJob | None:
        from airflow.utils.session import create_session

        with create_session() as session:
            return find_task_job(session, self.dag_id, self.run_id, self.task_id, self.map_index)

    def title(self) -> str:
        return self.task_id if self.map_index < 0 else f"{self.task_id} (map index {self.map_index})"


def task_instance(  # a function, not the class: FastAPI resolves a function's postponed annotations
    dag_id: Annotated[str, Query(min_length=1, max_length=250)],
    run_id: Annotated[str, Query(min_length=1, max_length=250)],
    task_id: Annotated[str, Query(min_length=1, max_length=250)],
    map_index: Annotated[str, Query(max_length=20)] = "-1",
) -> TaskInstanceRef:
    """The task instance of the request's query."""
    return TaskInstanceRef(dag_id, run_id, task_id, _map_index(map_index))


TaskInstanceDep = Annotated[TaskInstanceRef, Depends(task_instance)]


def _user_may_change(request: Request, user: Any) -> bool:
    try:
        may_change(request, user)
    except HTTPException:
        return False
    return True


def _view(reading: JobReading, job_id: str) -> JobView:
    history = reading.history
    return build_job_view(job_id, reading.cluster, history.live, history.accounting, time.time())


def _excerpts(reading: JobReading) -> tuple[OutputExcerpt, ...]:
    if reading.live:  # already made inert, line by line
        where = "published while the job runs (live output)"
        return tuple(OutputExcerpt(stream=stream, location=where, text=text) for stream, text in reading.live.items())
    return tuple(
        OutputExcerpt(
            stream=str(tail.stream),
            location=visible(tail.location),
            text="\n".join(job_lines(tail.text, "")),  # each line made inert, as the task log shows it
            problem=tail.problem,
        )
        for tail in reading.output
    )


def _read(task_job: TaskJob) -> tuple[JobReading | None, str | None]:
    """The job's reading, or the message that says why there is none."""
    try:
        return read_task_job(task_job), None
    except JobNotFoundError:
        return None, f"Slurm job {task_job.job_id} is in neither the live queue nor accounting."
    except SlurmJobApiError as error:
        return None, f"The Slurm Job API could not be read: {error}"
    except Exception as error:  # a connection that cannot be used: say so in the tab, not as a 500
        log.exception("The Slurm job tab could not read job %s", task_job.job_id)
        return None, f"The Slurm Job API could not be read: {type(error).__name__}"


def create_app() -> FastAPI:
    app = FastAPI(title="Slurm job tab", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/tab", response_class=HTMLResponse, dependencies=[Depends(may_read_logs)])
    def tab(request: Request, user: GetUserDep, ti: TaskInstanceDep) -> HTMLResponse:
        """The tab's page: everything the tab shows, read once."""
        nonce = secrets.token_urlsafe(16)
        context = PageContext(title=ti.title(), cancel_url=None, refresh_seconds=None, nonce=nonce)
        view: JobView | None = None
        message: str | None = "This task has not submitted or watched a Slurm job."
        task_job = ti.task_job()
        if task_job is not None:
            reading, message = _read(task_job)
            if reading is not None:
                view = _view(reading, task_job.job_id)
                accounting = reading.history.accounting_problem
                notes = [reading.output_problem, accounting and f"Accounting could not be read: {accounting}"]
                message = " ".join(note for note in notes if note) or None
                # relative to this page: right behind a proxy too, whatever host and scheme it shows
                cancel_url = f"cancel?{request.query_params}"
                context = PageContext(
                    title=ti.title(),
                    cancel_url=cancel_url if view.is_active and _user_may_change(request, user) else None,
                    refresh_seconds=REFRESH_SECONDS if view.is_active else None,
                    nonce=nonce,
                    output=_excerpts(reading),
                    output_link=task_job.output_link,
                )
        headers = {
            "Content-Security-Policy": content_security_policy(nonce),
            "X-Frame-Options": "SAMEORIGIN",
            "Cache-Control": "no-store",
            "Referrer-Policy": "same-origin",
        }
        return HTMLResponse(render_page(view, context, message), headers=headers)

    @app.get("/job", dependencies=[Depends(may_read_logs)])
    def job(request: Request, user: GetUserDep, ti: TaskInstanceDep) -> dict[str, Any]:
        """What the tab shows, as JSON."""
        task_job = ti.task_job()
        if task_job is None:
            raise HTTPException(404, "This task has not submitted or watched a Slurm job")
        reading, message = _read(task_job)
        if reading is None:
            raise HTTPException(502, message)
        return {
            "job": _view(reading, task_job.job_id).to_dict(),
            "output": [excerpt.__dict__ for excerpt in _excerpts(reading)],
            "output_link": task_job.output_link,
            "may_cancel": _user_may_change(request, user),
        }

    @app.post("/cancel", dependencies=[Depends(may_change)])
    def cancel(request: Request, user: GetUserDep, ti: TaskInstanceDep) -> dict[str, Any]:
        """Cancel the task instance's job, as the task's ``on_kill`` does."""
        if request.headers.get(CANCEL_HEADER) != "slurm-job-tab":
            raise HTTPException(400, f"a cancel needs the header {CANCEL_HEADER}: slurm-job-tab")
        task_job = ti.task_job()
        if task_job is None:
            raise HTTPException(404, "This task has not submitted or watched a Slurm job")
        try:
            was_active = hook_for(task_job).cancel_job(task_job.job_id)
        except SlurmJobApiError as error:
            raise HTTPException(502, f"Slurm job {task_job.job_id} could not be cancelled: {error}") from error
        finally:
            forget(task_job)
        _audit(user, ti, task_job, was_active=was_active)
        if was_active:
            return {"message": f"Slurm job {task_job.job_id} was cancelled.", "cancelled": True}
        return {"message": f"Slurm job {task_job.job_id} had already ended.", "cancelled": False}

    return app


def _audit(user: Any, ti: TaskInstanceRef, task_job: TaskJob, *, was_active: bool) -> None:
    """The cancel in the task's log and in Airflow's audit log, with who asked for it."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    name = user.get_name()
    log.info("User %s cancelled Slurm job %s of %s/%s/%s", name, task_job.job_id, ti.dag_id, ti.run_id, ti.task_id)
    extra = {"job_id": task_job.job_id, "was_active": was_active}
    with create_session() as session:
        session.add(
            Log(
                event="slurm_job_cancel",
                owner=name,
                extra=json.dumps(extra),
                dag_id=ti.dag_id,
                run_id=ti.run_id,
                task_id=ti.task_id,
                map_index=ti.map_index,
            )
        )
