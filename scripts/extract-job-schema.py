#!/usr/bin/env python3
"""Writes client/schemas/job_desc_msg.json from a slurmrestd OpenAPI document (GET /openapi/v3).

Usage: scripts/extract-job-schema.py OPENAPI.json

For each data parser version it keeps the job description schema and what it references, and
widens two spots where slurmrestd is more lenient than its own spec: a ``*_no_val_struct`` may be
a plain number, and a ``csv_string`` may be a comma-separated string. Unknown fields are refused
(slurmrestd only warns "Ignoring unknown field" and drops them).
"""

import json
import sys
from pathlib import Path

OUT = Path(__file__).parents[1] / "airflow_provider_slurmapi" / "client" / "schemas" / "job_desc_msg.json"


def extract(schemas: dict, version: str) -> dict:
    definitions: dict = {}

    def visit(node):
        if isinstance(node, dict):
            if "$ref" in node:
                name = node["$ref"].rsplit("/", 1)[-1]
                if name not in definitions:
                    definitions[name] = None
                    definitions[name] = widen(name, visit(schemas[name]))
                return {**{k: visit(v) for k, v in node.items() if k != "$ref"}, "$ref": f"#/definitions/{name}"}
            return {k: visit(v) for k, v in node.items()}
        if isinstance(node, list):
            return [visit(v) for v in node]
        return node

    root = visit(schemas[f"{version}_job_desc_msg"])
    root["additionalProperties"] = False
    return {"$schema": "http://json-schema.org/draft-07/schema#", **root, "definitions": definitions}


def widen(name: str, schema: dict) -> dict:
    if name.endswith("_no_val_struct"):
        return {"anyOf": [{"type": "number"}, schema]}
    if name.endswith("_csv_string"):
        return {"anyOf": [{"type": "string"}, schema]}
    return schema


def main() -> None:
    schemas = json.loads(Path(sys.argv[1]).read_text())["components"]["schemas"]
    versions = sorted(k.split("_")[0] for k in schemas if k.endswith("_job_desc_msg"))
    OUT.write_text(json.dumps({v: extract(schemas, v) for v in versions}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} for {', '.join(versions)}")


if __name__ == "__main__":
    main()
