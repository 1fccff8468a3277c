"""The API's operations as methods of the sync client, the async client and the hook alike.

Each operation is written once, as a generator in ``operations``; ``ApiOperation`` binds it to
whatever runs it with its ``ApiSettings``: ``client.get_job(1)`` is a ``JobStatus`` on a sync
client or the hook, and an awaitable of one on the async client.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from airflow_provider_slurmapi.client import operations
from airflow_provider_slurmapi.client.cluster import ClusterRef
from airflow_provider_slurmapi.client.paths import DEFAULT_API_VERSION, SlurmPaths
from airflow_provider_slurmapi.client.retry import RetryPolicy
from airflow_provider_slurmapi.client.steps import ApiSettings, Operation, read_again_if_unreadable

P = ParamSpec("P")
T = TypeVar("T")


class ApiOperation(Generic[P, T]):
    """An operation of ``operations`` as a method: the instance's settings go in first, and the
    instance's ``_run`` runs the generator (built anew when a reply was unreadable, see
    ``read_again_if_unreadable``)."""

    def __init__(self, build: Callable[Concatenate[ApiSettings, P], Operation[T]]) -> None:
        self.build = build
        self.method = self._as_method(build)

    @staticmethod
    def _as_method(build: Callable[..., Any]) -> Callable[..., Any]:
        """What the class shows (``help``, the API docs): the operation's parameters after the
        settings, and what the sync client and the hook return (the ``T`` of ``Operation[T]``)."""

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            settings = self.settings
            return self._run(read_again_if_unreadable(lambda: build(settings, *args, **kwargs), settings.retry))

        hints = typing.get_type_hints(build)
        _settings, *parameters = inspect.signature(build).parameters.values()
        method.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
            + [
                parameter.replace(annotation=hints.get(parameter.name, parameter.annotation))
                for parameter in parameters
            ],
            return_annotation=typing.get_args(hints["return"])[2],
        )
        return functools.wraps(build, assigned=("__name__", "__qualname__", "__doc__"))(method)

    @overload
    def __get__(self, instance: None, owner: type) -> Callable[..., Any]: ...
    @overload
    def __get__(self, instance: SyncOperations, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, instance: AsyncOperations, owner: type) -> Callable[P, Awaitable[T]]: ...
    def __get__(self, instance: object, owner: type) -> Callable[..., Any]:
        return self.method if instance is None else self.method.__get__(instance, owner)


class SlurmJobApiOperations:
    """The operations every client has; ``get_*`` raise when nothing is found, ``find_*`` return None.
    A subclass has the ``settings`` they run with and says how one runs (``_run``)."""

    submit_job = ApiOperation(operations.submit_job)
    submit_once = ApiOperation(operations.submit_once)
    find_job_by_key = ApiOperation(operations.find_job_by_key)
    get_job = ApiOperation(operations.get_job)
    find_job = ApiOperation(operations.find_job)
    job_records = ApiOperation(operations.job_records)
    job_history = ApiOperation(operations.job_history)
    describe_requeue = ApiOperation(operations.describe_requeue)
    job_states = ApiOperation(operations.job_states)
    list_jobs = ApiOperation(operations.list_jobs)
    ended_jobs = ApiOperation(operations.ended_jobs)
    cancel_job = ApiOperation(operations.cancel_job)
    call = ApiOperation(operations.call)
    ping = ApiOperation(operations.ping)


class SyncOperations(SlurmJobApiOperations):
    """Operations that run to their result before returning (the sync client, the hook)."""

    def _run(self, operation: Operation[T]) -> T:
        raise NotImplementedError


class AsyncOperations(SlurmJobApiOperations):
    """Operations that return an awaitable of their result (the async client), and those only the
    triggerer's shared poller asks for: the live queue's changes, and the requeue lines of many jobs."""

    queue_changes = ApiOperation(operations.queue_changes)
    requeue_lines = ApiOperation(operations.requeue_lines)

    async def _run(self, operation: Operation[T]) -> T:
        raise NotImplementedError


class ClusterClient:
    """What a client is made with: the cluster, its Slurm REST version, a timeout, a retry policy."""

    def __init__(
        self,
        cluster: ClusterRef,
        *,
        api_version: str = DEFAULT_API_VERSION,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.cluster = cluster
        self.paths = SlurmPaths(api_version)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.settings = ApiSettings(self.paths, self.retry)
