"""The site ``benchmarks.load`` runs: the test app's Article behind the REST API, on a
primary PostgreSQL and a read replica, with Redis and Celery (settings from the environment)."""
