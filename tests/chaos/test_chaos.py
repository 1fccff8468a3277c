"""The chaos run: many task runs under random API faults, worker kills and triggerer restarts.

Every task run must have exactly one Slurm job, or a second one only after the first failed while
no try watched it; none may be lost, and the task's outcome must agree with Slurm's; no token, key material or job environment value may appear in any log line.
Size and seed: ``SLURM_CHAOS_TASK_RUNS`` (default 200), ``SLURM_CHAOS_SEED`` (default 1).
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

import pytest

from airflow_provider_slurmapi.emulator import FAULT_KINDS, Emulator, EmulatorConfig, FaultPlan, ScriptedFault
from airflow_provider_slurmapi.hooks.slurm_job_api import SlurmJobApiHook
from tests.chaos.harness import Chaos, Harness, format_table, verify
from tests.conftest import connection_json

pytestmark = pytest.mark.chaos

FAULT_RATE = 0.1  # of all API calls
# Submits are few among the calls, so the faults that threaten "submitted once" most are also
# scripted on the first submits of every run, whatever the random plan picks after them.
SUBMIT_SCRIPT = (
    ScriptedFault("late_landing", "POST", r"job/submit$", times=4),
    ScriptedFault("slurmctld_unreachable", "POST", r"job/submit$", times=2),
)


def secrets_in(emu: Emulator, job_secret: str) -> dict[str, str]:
    """Each secret to look for, by a name that says what it is without showing it."""
    found = {f"access token #{n}": token for n, token in enumerate(emu.tokens.history)}
    key_lines = [line for line in emu.service_account_info["private_key"].splitlines() if "PRIVATE KEY" not in line]
    found.update({f"private key line {n}": line for n, line in enumerate(key_lines) if len(line) >= 16})
    found["job environment value WANDB_API_KEY"] = job_secret
    return found


def leaks(texts: dict[str, str], secret_values: dict[str, str]) -> list[str]:
    return [
        f"{what} in {where}" for where, text in texts.items() for what, value in secret_values.items() if value in text
    ]


def test_chaos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    count = int(os.environ.get("SLURM_CHAOS_TASK_RUNS", "200"))
    seed = int(os.environ.get("SLURM_CHAOS_SEED", "1"))
    plan = FaultPlan(rate=FAULT_RATE, kinds=FAULT_KINDS, seed=seed, latency=0.5)
    config = EmulatorConfig(
        min_job_age=3.0,  # retries also find jobs that left the live queue, in accounting
        sched_delay=0.2,
        key_file=tmp_path / "key.json",
        state_dir=tmp_path / "jobs",
        faults=plan,
    )
    job_secret = "chaos-" + secrets.token_hex(16)
    triggerer_log = tmp_path / "triggerer.log"
    handler = logging.FileHandler(triggerer_log)
    root = logging.getLogger()
    root.addHandler(handler)
    previous_level, root.level = root.level, logging.DEBUG
    try:
        with Emulator(config) as emu:
            emu.faults.script(*SUBMIT_SCRIPT)
            monkeypatch.setenv("AIRFLOW_CONN_SLURM_JOB_API_DEFAULT", connection_json(emu))
            chaos = Chaos(seed=seed)
            runs = Harness(chaos, tmp_path, job_secret).run_all(count, concurrency=8)
            fault_log = emu.faults.log
            emu.faults.set_plan(None)
            listed = SlurmJobApiHook().call("GET", "/slurmdb/v0.0.42/jobs")["jobs"]
            verdict = verify(runs, listed, fault_log, chaos)
            secret_values = secrets_in(emu, job_secret)
    finally:
        root.removeHandler(handler)
        root.level = previous_level
        handler.close()
    texts = {path.name: path.read_text(errors="replace") for path in tmp_path.glob("*.log")}
    texts["task outcomes"] = "\n".join(run.outcome for run in runs)
    leaked = leaks(texts, secret_values)
    scanned = sum(text.count("\n") for text in texts.values())
    verdict.table.append(
        ("log lines searched for secrets", f"{scanned} ({len(secret_values)} secrets, {len(leaked)} found)")
    )
    print("\n" + format_table(verdict.table))

    assert not verdict.problems, "\n".join(verdict.problems[:20])
    assert (verdict.duplicates, verdict.lost, verdict.disagreements) == (0, 0, 0)
    assert {record.kind for record in fault_log} == set(FAULT_KINDS)  # every kind of fault was met
    assert sum(verdict.submit_faults.values()) > 0 and sum(run.kills for run in runs) > 0  # the run was really rough
    for scripted in SUBMIT_SCRIPT:  # the late submits and slurmctld's outages did meet submits
        assert verdict.submit_faults[scripted.kind] >= scripted.times, (scripted, verdict.submit_faults)
    assert not leaked, leaked
    assert scanned > 10 * count  # the logs were really written and read
