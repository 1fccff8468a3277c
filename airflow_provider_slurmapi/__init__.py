"""Apache Airflow provider for Google Cloud's Slurm Job API."""

__version__ = "0.7.0"
