"""``BuiltinBackend``: answer each Slurm REST route as slurmctld and slurmdbd would, from the
jobs of an emulated cluster (``Scheduler``) whose scripts run as local processes (``ProcessRunner``).

``backend`` routes each call; ``job_table`` finds the records a call names; ``live_queue``,
``cancel`` and ``submit`` answer slurmctld's routes, ``accounting`` (with ``accounting_query``)
slurmdbd's; ``answers`` holds the error replies they share.
"""

from airflow_provider_slurmapi.emulator.builtin.backend import BuiltinBackend

__all__ = ["BuiltinBackend"]
