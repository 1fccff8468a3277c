"""A local stand-in for Google Cloud's Slurm Job API (callSlurmRestApi), for tests and demos.

from airflow_provider_slurmapi.emulator import Emulator, EmulatorConfig

with Emulator(EmulatorConfig(seconds_per_minute=2.0)) as emu:
    token = emu.issue_token()
    ...  # POST emu.url + "/v1beta1/projects/test-project/locations/us-central1/"
         #      "modelDevelopmentClusters/test-cluster:callSlurmRestApi"
"""

from airflow_provider_slurmapi.emulator.backend_api import CONTROL_ACTIONS, ControlError, SlurmBackend, SlurmRequest
from airflow_provider_slurmapi.emulator.builtin import BuiltinBackend
from airflow_provider_slurmapi.emulator.faults import (
    FAULT_HEADER,
    FAULT_KINDS,
    FaultInjector,
    FaultPlan,
    FaultRecord,
    ScriptedFault,
)
from airflow_provider_slurmapi.emulator.request_log import LoggedCall, RequestLog
from airflow_provider_slurmapi.emulator.service import Emulator, EmulatorConfig

__all__ = [
    "CONTROL_ACTIONS",
    "FAULT_HEADER",
    "FAULT_KINDS",
    "BuiltinBackend",
    "ControlError",
    "Emulator",
    "EmulatorConfig",
    "FaultInjector",
    "FaultPlan",
    "FaultRecord",
    "LoggedCall",
    "RequestLog",
    "ScriptedFault",
    "SlurmBackend",
    "SlurmRequest",
]
