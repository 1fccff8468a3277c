"""Checks a job description against slurmrestd's own schema before anything is sent.

slurmrestd accepts some bad input with only a warning ("minimum_nodes": "abc" is coerced, unknown
fields are dropped) and still creates the job, so such mistakes are refused here instead.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from typing import Any

from airflow_provider_slurmapi.client.errors import InvalidRequestError


@cache
def _schemas() -> dict[str, Any]:
    text = resources.files("airflow_provider_slurmapi.client").joinpath("schemas/job_desc_msg.json").read_text()
    schemas: dict[str, Any] = json.loads(text)  # the schema of each Slurm REST version
    return schemas


def validate_job_description(job: dict[str, Any], api_version: str) -> None:
    """Raise InvalidRequestError naming the first wrong field of ``job``, and what is allowed there."""
    schema = _schemas().get(api_version)
    if schema is None:  # a version this provider has no schema for: slurmrestd is the judge
        return
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema).iter_errors(job))
    if error is None:
        return
    field = "job" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    if error.validator == "additionalProperties":
        known = error.schema.get("properties", {})
        unknown = sorted(set(error.instance) - set(known))
        close = difflib.get_close_matches(unknown[0], known, n=1) if unknown else []
        suggestion = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidRequestError(
            f"{field}.{unknown[0]}" if unknown else field,
            f"unknown field(s) {', '.join(unknown)} for Slurm {api_version}{suggestion} "
            "(see the job description, job_desc_msg, of your Slurm REST API version)",
        )
    description = error.schema.get("description") or _property_description(schema, error.absolute_path)
    hint = f" ({description})" if description else ""
    shown = repr(error.instance)
    if list(error.absolute_path)[:1] == ["environment"]:
        shown = f"a {type(error.instance).__name__} (value hidden: environment values may be secrets)"
    message = error.message.replace(repr(error.instance), shown)
    if error.validator == "anyOf":
        allowed = " or ".join(_shape(option, schema) for option in error.validator_value)
        message = f"{shown} is not allowed; expected {allowed}"
    raise InvalidRequestError(field, f"{message}{hint}")


def _shape(option: dict[str, Any], schema: dict[str, Any]) -> str:
    if "$ref" in option:
        option = schema["definitions"][option["$ref"].rsplit("/", 1)[-1]]
    kind = option.get("type")
    if kind == "object":
        return "an object with " + "/".join(sorted(option.get("properties", {})))
    if kind == "array":
        return "a list"
    return f"a {kind}"


def _property_description(schema: dict[str, Any], path: Any) -> str:
    names = [p for p in path if isinstance(p, str)]
    node = schema.get("properties", {}).get(names[0], {}) if len(names) == 1 else {}
    return str(node.get("description", ""))
