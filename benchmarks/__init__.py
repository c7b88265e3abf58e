"""Scripts that print measured figures; never part of the test pass/fail.

Each runs from the repository root as ``python -m benchmarks.<name>`` (benchmarks/README.md
lists them). Shared helpers: ``common`` (percentiles, the CPU line, ``--json``), ``data`` (the
texts of ../shared/data), ``django_setup`` (settings, the test app's models, the database).
"""
