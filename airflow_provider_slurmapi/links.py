"""The task's link to its job's output in the Cloud console (for ``gs://`` output locations only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import TaskInstanceKey


class SlurmJobOutputLink(BaseOperatorLink):
    """Opens the job's output object in the Cloud console; empty unless the task pushed its URL."""

    name = "Slurm job output"
    key = "slurm_output_console_url"

    @property
    def xcom_key(self) -> str:  # Airflow 3 reads the link from this XCom without calling get_link
        return self.key

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        # The task that just ran knows its link (Airflow 3's task runner asks it as the task ends,
        # and a missing XCom would log an error); a web server's deserialized task reads the XCom.
        url = getattr(operator, "output_console_url", None)
        if url is None:
            from airflow.providers.common.compat.sdk import XCom

            url = XCom.get_value(key=self.key, ti_key=ti_key)
        return url if isinstance(url, str) and url.startswith("https://") else ""
