"""The Slurm job tab's FastAPI app, which Airflow 3.1+'s api-server mounts under ``/slurm-job``.

Every endpoint goes through the api-server's own authentication (its token, from the
``Authorization`` header or the UI's cookie) and asks the auth manager itself about the request's
DAG (``may``): the tab and its JSON need what reading the task's log needs (they show the job's
output), a cancel needs what changing the task instance needs. (Airflow's ``requires_access_dag``
reads the DAG from the query string only since 3.1.8: before, it asked about DAGs in general.) A
cancel also needs a JSON body and the ``X-Requested-By`` header, which a page of another site
cannot send without the api-server's consent (CORS). What the api-server reads is ``ui.trust``'s to
decide.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from airflow_provider_slurmapi.client.errors import JobNotFoundError, SlurmJobApiError
from airflow_provider_slurmapi.client.output import job_lines, visible
from airflow_provider_slurmapi.ui.job_view import JobView, build_job_view
from airflow_provider_slurmapi.ui.page import OutputExcerpt, PageContext, content_security_policy, render_page
from airflow_provider_slurmapi.ui.task_job import (
    JobReading,
    Refused,
    TaskJob,
    find_task_job,
    forget,
    hook_for,
    read_task_job,
)
from airflow_provider_slurmapi.ui.trust import Ownership, TaskRun

log = logging.getLogger(__name__)

REFRESH_SECONDS = 15  # an open tab on an active job reads it again this often, while it is visible
CANCEL_HEADER = "X-Requested-By"
Access = tuple[Literal["GET", "PUT"], DagAccessEntity]
READ: Access = ("GET", DagAccessEntity.TASK_LOGS)
CHANGE: Access = ("PUT", DagAccessEntity.TASK_INSTANCE)


def _map_index(map_index: str) -> int:
    # the UI leaves {MAP_INDEX} as it is for a task that is not mapped
    try:
        return int(map_index)
    except ValueError:
        return -1


@dataclass(frozen=True)
class TaskInstanceRef(TaskRun):
    """The task instance a request is about."""

    def task_job(self) -> TaskJob | None:
        from airflow.utils.session import create_session

        with create_session() as session:
            return find_task_job(session, self)

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


def may(user: Any, ti: TaskRun, what: Access) -> bool:
    """Whether the auth manager lets ``user`` do ``what`` on the task's own DAG."""
    method, entity = what
    details = DagDetails(id=ti.dag_id, team_name=_team_of(ti.dag_id))
    return bool(get_auth_manager().is_authorized_dag(method=method, access_entity=entity, details=details, user=user))


def _team_of(dag_id: str) -> str | None:
    """The DAG's team, as Airflow's own checks pass it (multi-team deployments)."""
    from airflow.models.dag import DagModel

    return DagModel.get_team_name(dag_id) if hasattr(DagModel, "get_team_name") else None


def _require(user: Any, ti: TaskRun, what: Access) -> None:
    if not may(user, ti, what):
        raise HTTPException(403, "Forbidden")  # as the api-server says it: nothing of the job


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
        reading = read_task_job(task_job)
    except Refused as refused:
        return None, str(refused)
    except JobNotFoundError:
        return None, f"Slurm job {task_job.job_id} is in neither the live queue nor accounting."
    except SlurmJobApiError as error:
        return None, f"The Slurm Job API could not be read: {error}"
    except Exception as error:  # a connection that cannot be used: say so in the tab, not as a 500
        log.exception("The Slurm job tab could not read job %s", task_job.job_id)
        return None, f"The Slurm Job API could not be read: {type(error).__name__}"
    if reading.ownership is Ownership.STRANGER:
        return None, STRANGER
    return reading, None


STRANGER = (
    "The job this task names is not its own (its record does not carry the task's submission key), "
    "so the tab shows nothing of it."
)


def create_app() -> FastAPI:
    app = FastAPI(title="Slurm job tab", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/tab", response_class=HTMLResponse)
    def tab(request: Request, user: GetUserDep, ti: TaskInstanceDep) -> HTMLResponse:
        """The tab's page: everything the tab shows, read once."""
        _require(user, ti, READ)
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
                notes = [_watched_note(reading), reading.output_problem]
                notes.append(accounting and f"Accounting could not be read: {accounting}")
                message = " ".join(note for note in notes if note) or None
                # relative to this page: right behind a proxy too, whatever host and scheme it shows
                cancel_url = f"cancel?{request.query_params}"
                context = PageContext(
                    title=ti.title(),
                    cancel_url=cancel_url if view.is_active and _may_cancel(reading, user, ti) else None,
                    refresh_seconds=REFRESH_SECONDS if view.is_active else None,
                    nonce=nonce,
                    output=_excerpts(reading),
                    output_link=reading.output_link,
                )
        headers = {
            "Content-Security-Policy": content_security_policy(nonce),
            "X-Frame-Options": "SAMEORIGIN",
            "Cache-Control": "no-store",
            "Referrer-Policy": "same-origin",
        }
        return HTMLResponse(render_page(view, context, message), headers=headers)

    @app.get("/job")
    def job(user: GetUserDep, ti: TaskInstanceDep) -> dict[str, Any]:
        """What the tab shows, as JSON."""
        _require(user, ti, READ)
        task_job = ti.task_job()
        if task_job is None:
            raise HTTPException(404, "This task has not submitted or watched a Slurm job")
        reading, message = _read(task_job)
        if reading is None:
            raise HTTPException(409 if message == STRANGER else 502, message)
        return {
            "job": _view(reading, task_job.job_id).to_dict(),
            "ownership": str(reading.ownership),
            "output": [excerpt.__dict__ for excerpt in _excerpts(reading)],
            "output_link": reading.output_link,
            "may_cancel": _may_cancel(reading, user, ti),
        }

    @app.post("/cancel")
    def cancel(request: Request, user: GetUserDep, ti: TaskInstanceDep) -> dict[str, Any]:
        """End the task instance as "mark failed" does (no retry submits its job again), then cancel
        its job, as the task's ``on_kill`` does."""
        _require(user, ti, CHANGE)
        if request.headers.get(CANCEL_HEADER) != "slurm-job-tab":
            raise HTTPException(400, f"a cancel needs the header {CANCEL_HEADER}: slurm-job-tab")
        task_job = ti.task_job()
        if task_job is None:
            raise HTTPException(404, "This task has not submitted or watched a Slurm job")
        reading, message = _read(task_job)
        if reading is None or reading.ownership is not Ownership.OWN:
            raise HTTPException(
                409,
                message
                or f"Slurm job {task_job.job_id} was submitted elsewhere: the tab cancels only the task's own job.",
            )
        ended = _end_task_instance(ti)
        try:
            # the task's own on_kill (its worker or trigger, stopped as for "mark failed") may cancel
            # the job first: it was still cancelled, if it was active when read just before
            was_active = hook_for(task_job).cancel_job(task_job.job_id) or _view(reading, task_job.job_id).is_active
        except SlurmJobApiError as error:
            raise HTTPException(502, f"Slurm job {task_job.job_id} could not be cancelled: {error}") from error
        finally:
            forget(task_job)
        _audit(user, ti, task_job, was_active=was_active, task_state=ended)
        if was_active:
            return {"message": f"Slurm job {task_job.job_id} was cancelled.", "cancelled": True}
        return {"message": f"Slurm job {task_job.job_id} had already ended.", "cancelled": False}

    return app


def _may_cancel(reading: JobReading, user: Any, ti: TaskRun) -> bool:
    """Only the task's own job, only for those who may change the task instance."""
    return reading.ownership is Ownership.OWN and may(user, ti, CHANGE)


def _watched_note(reading: JobReading) -> str | None:
    if reading.ownership is Ownership.WATCHED:
        return "This task watches a job submitted elsewhere: the tab shows it read-only."
    return None


def _end_task_instance(ti: TaskRun) -> str | None:
    """Mark the task instance failed, as Airflow's "mark failed" does, unless it has already ended:
    a retry would submit the cancelled job again. Its state before, or None if it has no row."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import State, TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalar(
            select(TaskInstance).where(
                TaskInstance.dag_id == ti.dag_id,
                TaskInstance.run_id == ti.run_id,
                TaskInstance.task_id == ti.task_id,
                TaskInstance.map_index == ti.map_index,
            )
        )
        if row is None:
            return None
        before = row.state
        if before not in State.finished:
            row.set_state(TaskInstanceState.FAILED, session=session)
        return str(before) if before else None


def _audit(user: Any, ti: TaskRun, task_job: TaskJob, *, was_active: bool, task_state: str | None) -> None:
    """The cancel in the api-server's log and in Airflow's audit log, with who asked for it."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    name = user.get_name()
    log.info("User %s cancelled Slurm job %s of %s/%s/%s", name, task_job.job_id, ti.dag_id, ti.run_id, ti.task_id)
    extra = {"job_id": task_job.job_id, "was_active": was_active, "task_state_before": task_state}
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
