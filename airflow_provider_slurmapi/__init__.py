"""Apache Airflow provider for Google Cloud's Slurm Job API."""

__version__ = "0.8.0"
