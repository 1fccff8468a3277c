"""The built-in backend answers in the same shape as real Slurm, reply by reply.

For every scenario, each (method, route, Slurm status) the built-in backend answered must also
have come from real Slurm, and each built-in reply must match one real reply's keys and value
types (``tests/shapes.py``). Runs after all scenarios on both backends (see conftest).
"""

from __future__ import annotations

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


@pytest.mark.after_scenarios
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_builtin_replies_have_real_slurm_shapes(scenario: str) -> None:
    for backend in ("builtin", "slurmrestd"):
        if backend in SKIPPED:
            pytest.skip(f"no {backend} replies to compare: {SKIPPED[backend]}")
    builtin = {key[1:]: replies for key, replies in RECORDED["builtin"].items() if key[0] == scenario}
    real = {key[1:]: replies for key, replies in RECORDED["slurmrestd"].items() if key[0] == scenario}
    if not builtin or not real:
        pytest.skip(f"scenario {scenario} did not run on both backends")
    problems = [f"{key}: only real Slurm answered this" for key in sorted(set(real) - set(builtin))]
    problems += [f"{key}: real Slurm never answered this" for key in sorted(set(builtin) - set(real))]
    for key in sorted(set(builtin) & set(real)):
        for reply in builtin[key]:
            diffs = [shape_diff(reply, expected) for expected in real[key]]
            if all(diffs):
                problems += [f"{key} {diff}" for diff in min(diffs, key=len)]
    assert sorted(set(problems)) == []
