"""Sphinx configuration of the airflow-provider-slurmapi documentation."""

from __future__ import annotations

import os
import tempfile
from datetime import date

from airflow_provider_slurmapi import __version__

# autodoc imports the package, hence Airflow, which creates AIRFLOW_HOME: keep that out of ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", os.path.join(tempfile.gettempdir(), "airflow-provider-slurmapi-docs"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

project = "airflow-provider-slurmapi"
author = "airflow-provider-slurmapi contributors"
copyright = f"{date.today().year}, {author}"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "examples", "Thumbs.db", ".DS_Store"]

myst_heading_anchors = 3

autodoc_default_options = {
    "show-inheritance": True,
    "member-order": "bysource",
}
autodoc_typehints = "description"
autodoc_inherit_docstrings = False

html_theme = "furo"
html_title = f"{project} {release}"
html_static_path = ["_static"]
