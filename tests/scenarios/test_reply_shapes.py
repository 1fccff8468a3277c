"""The built-in backend answers in the same shape as real Slurm, reply by reply.

For every scenario, each (method, route, Slurm status) the built-in backend answered must also
have come from real Slurm, and each built-in reply must match one real reply's keys and value
types (``tests/shapes.py``). Runs after all scenarios on both backends (see conftest).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from tests.scenarios import test_scenarios
from tests.scenarios.conftest import RECORDED, SKIPPED, route_of
from tests.shapes import shape_diff

SCENARIOS = sorted(name.removeprefix("test_") for name in dir(test_scenarios) if name.startswith("test_"))


def test_route_of_hides_job_ids_and_query_values() -> None:
    assert route_of("/slurm/v0.0.42/job/17") == "/slurm/v0.0.42/job/{id}"
    assert route_of("/slurm/v0.0.42/job/17_3") == "/slurm/v0.0.42/job/{id}"
    assert route_of("/slurm/v0.0.42/jobs/") == "/slurm/v0.0.42/jobs"
    assert route_of("/slurm/v0.0.42/job/17?signal=KILL") == "/slurm/v0.0.42/job/{id}?signal"
    assert route_of("/slurm/v0.0.42/job/submit") == "/slurm/v0.0.42/job/submit"


def units(reply: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """A reply in comparable parts: the envelope, and each job by its state.

    Which states a poll happens to see depends on timing, so jobs are compared with jobs of
    the same state, not reply with reply.
    """
    yield "envelope", {key: value for key, value in reply.items() if key != "jobs"}
    for job in reply.get("jobs") or []:
        state = job.get("job_state") or (job.get("state") or {}).get("current") or ["?"]
        yield f"job {state[0] if isinstance(state, list) else state}", job


def real_units(scenario: str | None) -> dict[tuple[Any, ...], list[Any]]:
    found: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for key, replies in RECORDED["slurmrestd"].items():
        if scenario is None or key[0] == scenario:
            for reply in replies:
                for part, value in units(reply):
                    found[(*key[1:], part)].append(value)
    return found


@pytest.mark.after_scenarios
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_builtin_replies_have_real_slurm_shapes(scenario: str) -> None:
    for backend in ("builtin", "slurmrestd"):
        if backend in SKIPPED:
            pytest.skip(f"no {backend} replies to compare: {SKIPPED[backend]}")
    builtin = {key[1:]: replies for key, replies in RECORDED["builtin"].items() if key[0] == scenario}
    real = {key[1:] for key in RECORDED["slurmrestd"] if key[0] == scenario}
    if not builtin or not real:
        pytest.skip(f"scenario {scenario} did not run on both backends")
    problems = [f"{key}: only real Slurm answered this" for key in sorted(real - set(builtin))]
    problems += [f"{key}: real Slurm never answered this" for key in sorted(set(builtin) - real)]
    here, anywhere = real_units(scenario), real_units(None)
    for key, replies in builtin.items():
        for reply in replies:
            for part, value in units(reply):
                expected = here.get((*key, part)) or anywhere.get((*key, part))
                if not expected:
                    problems.append(f"{key} {part}: real Slurm never answered this")
                    continue
                diffs = [shape_diff(value, candidate) for candidate in expected]
                if all(diffs):
                    problems += [f"{key} {part} {diff}" for diff in min(diffs, key=len)]
    assert sorted(set(problems)) == []
