"""The deployment's secret that @task.slurm_python derives its result keys from: one Airflow
Variable, created by the first try that finds none, masked wherever Airflow shows it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_provider_slurmapi.decorators import result_secret
from airflow_provider_slurmapi.decorators.result_secret import RESULT_SECRET_VARIABLE, new_result_secret
from tests.unit.task_fakes import FakeVariables

ADMINS = "an administrator's secret, long enough: 0123456789"
OTHER_TRYS = "s" + "7a" * 32


@pytest.fixture
def masked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    values: list[str] = []
    monkeypatch.setattr(result_secret, "mask_secret", values.append)
    return values


def test_the_first_try_creates_the_secret_and_the_next_ones_read_it(
    variables: FakeVariables, masked: list[str]
) -> None:
    created = result_secret.result_secret()
    assert variables.values == {RESULT_SECRET_VARIABLE: created}
    assert "@task.slurm_python" in str(variables.descriptions[RESULT_SECRET_VARIABLE])
    assert result_secret.result_secret() == created
    assert set(masked) == {created}  # registered before it is written, and wherever it is read


def test_a_secret_an_administrator_created_beforehand_is_used_as_it_is(variables: FakeVariables) -> None:
    variables.values[RESULT_SECRET_VARIABLE] = ADMINS
    assert result_secret.result_secret() == ADMINS
    assert variables.values == {RESULT_SECRET_VARIABLE: ADMINS}


class CreatedByAnotherTryAtOnce(FakeVariables):
    """Another try, which found no secret either, writes its own just after this try's."""

    def set(self, key: str, value: str, description: str | None = None) -> None:
        super().set(key, value, description)
        super().set(key, OTHER_TRYS, description)


def test_two_tries_that_create_the_secret_at_once_use_the_one_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    racing = CreatedByAnotherTryAtOnce()
    monkeypatch.setattr(result_secret, "_variables", lambda: racing)
    assert result_secret.result_secret() == OTHER_TRYS == racing.values[RESULT_SECRET_VARIABLE]


def test_new_secrets_are_256_random_bits_in_text_that_never_reads_as_json() -> None:
    """Airflow 3's REST API masks a sensitive Variable's value only if it does not parse as JSON: a
    value of decimal digits alone, which hex digits may be, would be shown as it is."""
    created = {new_result_secret() for _ in range(100)}
    assert len(created) == 100
    for secret in created:
        assert re.fullmatch("s[0-9a-f]{64}", secret)
        with pytest.raises(ValueError):
            json.loads(secret)


@pytest.mark.parametrize(
    ("stored", "why"),
    [
        ("0123456789abcdef", "it takes at least 32 characters"),
        ("1" * 64, "reads as JSON"),
        (json.dumps("a quoted secret, long enough to pass"), "reads as JSON"),
        (json.dumps({"secret": "a secret in an object, long enough"}), "reads as JSON"),
    ],
)
def test_a_secret_too_short_or_that_airflow_could_show_unmasked_is_refused_unsaid(
    variables: FakeVariables, stored: str, why: str
) -> None:
    variables.values[RESULT_SECRET_VARIABLE] = stored
    with pytest.raises(AirflowFailException, match=why) as refused:
        result_secret.result_secret()
    assert RESULT_SECRET_VARIABLE in str(refused.value) and stored not in str(refused.value)


def test_variables_out_of_reach_fail_the_try_naming_the_variable(variables: FakeVariables) -> None:
    variables.broken = True
    with pytest.raises(AirflowException, match=f"Cannot read Airflow Variable '{RESULT_SECRET_VARIABLE}'"):
        result_secret.result_secret()


def test_the_secrets_name_is_one_whose_value_airflow_masks() -> None:
    assert "secret" in RESULT_SECRET_VARIABLE
    assert should_hide_value_for_key(RESULT_SECRET_VARIABLE)
    assert not should_hide_value_for_key("slurm_job_id.0123456789abcdef01234567")  # the record: not secret


def should_hide_value_for_key(name: str) -> Any:
    try:
        from airflow._shared.secrets_masker import should_hide_value_for_key as hidden  # Airflow 3
    except ImportError:
        from airflow.utils.log.secrets_masker import should_hide_value_for_key as hidden  # Airflow 2.11
    return hidden(name)
