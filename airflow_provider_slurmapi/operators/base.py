"""What every Slurm task is made with: the connection and cluster arguments, and the hook built
from them.

Importing this module stays cheap (it is imported at every DAG parse): the hook and its HTTP and
Google libraries are imported only when a task runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator

from airflow_provider_slurmapi.get_provider_info import DEFAULT_CONN_ID

if TYPE_CHECKING:
    from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

# The connection and cluster arguments that are templated.
CONNECTION_TEMPLATE_FIELDS = ("project_id", "region", "cluster_id", "api_version", "impersonation_chain")


class SlurmBaseOperator(BaseOperator):
    """The connection and cluster arguments every Slurm operator and sensor takes.

    Each is declared here once: a new one is a parameter below (and, if it is templated, a name in
    ``CONNECTION_TEMPLATE_FIELDS``); the hook, the trigger and every task get it through ``hook_kwargs``.

    :param slurm_conn_id: connection of type ``slurm_job_api``.
    :param project_id: overrides the connection's project. Templated.
    :param region: overrides the connection's region. Templated.
    :param cluster_id: overrides the connection's cluster. Templated.
    :param api_version: overrides the connection's Slurm REST version. Templated.
    :param impersonation_chain: service account(s) to impersonate. Templated.
    :param retry_attempts: overrides the connection's attempts per request (1-20).
    :param retry_max_seconds: overrides the connection's seconds of retrying per request (0-3600).
    """

    def __init__(
        self,
        *,
        slurm_conn_id: str = DEFAULT_CONN_ID,
        project_id: str | None = None,
        region: str | None = None,
        cluster_id: str | None = None,
        api_version: str | None = None,
        impersonation_chain: str | Sequence[str] | None = None,
        retry_attempts: int | None = None,
        retry_max_seconds: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.slurm_conn_id = slurm_conn_id
        self.project_id = project_id
        self.region = region
        self.cluster_id = cluster_id
        self.api_version = api_version
        self.impersonation_chain = impersonation_chain
        self.retry_attempts = retry_attempts
        self.retry_max_seconds = retry_max_seconds

    @property
    def hook_kwargs(self) -> dict[str, Any]:
        """The connection arguments (as rendered), as the hook and the trigger take them."""
        return connection_kwargs({name: getattr(self, name) for name in CONNECTION_ARGUMENTS})

    @cached_property
    def hook(self) -> SlurmJobApiHook:
        from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook

        return SlurmJobApiHook(**self.hook_kwargs)


# The parameters of SlurmBaseOperator.__init__, read from its signature so that they are named once
# (the job-event trigger takes them too).
CONNECTION_PARAMETERS = {
    name: parameter
    for name, parameter in inspect.signature(SlurmBaseOperator.__init__).parameters.items()
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY
}
CONNECTION_ARGUMENTS = tuple(CONNECTION_PARAMETERS)


def connection_kwargs(given: Mapping[str, Any]) -> dict[str, Any]:
    """Every connection argument, as ``given`` or at its default, as the hook and the triggers take them."""
    arguments = {name: given.get(name, parameter.default) for name, parameter in CONNECTION_PARAMETERS.items()}
    chain = arguments["impersonation_chain"]
    if chain and not isinstance(chain, str):
        arguments["impersonation_chain"] = list(chain)  # a trigger's arguments are plain JSON
    return arguments
