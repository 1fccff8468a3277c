"""The Slurm job tab of Airflow 3.1+'s task instance page: a plugin, its FastAPI app and the page it serves."""
