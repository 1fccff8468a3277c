"""The Slurm job description the tests submit: real slurmrestd refuses a submit without an
environment (500/2019) or a working directory (500/2063). A test that needs more derives its own,
``{**JOB, "array": "0-3"}``, and leaves this one as it is."""

from __future__ import annotations

JOB = {"name": "test-job", "environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp"}
