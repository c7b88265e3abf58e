"""Run Wagtail's backend suite (backends.py) and report, per backend: passed, differs by
design, open (failing, to fix), failed.

    python -m tests.wagtail.suite.run [--json FILE] [TEST LABEL ...]

Runs under ``tests.wagtail.suite.settings`` with Django's test runner, the way Wagtail runs its
own tests; exits 0 when every test passed or differs as docs/wagtail.md says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unittest
from collections import Counter, defaultdict

OUTCOMES = ("passed", "differs", "open", "failed", "skipped")


class Recording(unittest.TextTestResult):
    """Each test's outcome: passed, differs (by design: an expected failure listed in
    ``DIFFERS``), open (an expected failure listed in ``OPEN``: to fix), failed (a failure, an
    error or an unexpected success) or skipped."""

    outcomes: list[tuple[str, str, str, str]] = []

    def _record(self, test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        name = test.id().rsplit(".", 2)
        Recording.outcomes.append((name[-2], name[-1], outcome, detail))

    def addSuccess(self, test):  # noqa: N802
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):  # noqa: N802
        super().addFailure(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):  # noqa: N802
        super().addError(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):  # noqa: N802
        super().addExpectedFailure(test, err)
        from tests.wagtail.suite.backends import OPEN

        name = test.id().rsplit(".", 1)[-1]
        self._record(test, "open" if name in OPEN.get(getattr(test, "mode", ""), {}) else "differs")

    def addUnexpectedSuccess(self, test):  # noqa: N802
        super().addUnexpectedSuccess(test)
        self._record(test, "failed", "unexpected success: listed as differing, but passed")

    def addSkip(self, test, reason):  # noqa: N802
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addSubTest(self, test, subtest, err):  # noqa: N802
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._record(test, "failed", self._exc_info_to_string(err, test))


def summary(outcomes: list[tuple[str, str, str, str]]) -> dict[str, dict[str, int]]:
    """{class: {outcome: count}}, one outcome per test (a failed subtest fails its test)."""
    per_test: dict[tuple[str, str], str] = {}
    for cls, test, outcome, _ in outcomes:
        if per_test.get((cls, test)) != "failed":
            per_test[(cls, test)] = outcome
    table: dict[str, Counter] = defaultdict(Counter)
    for (cls, _), outcome in per_test.items():
        table[cls][outcome] += 1
    return {cls: {o: counts[o] for o in OUTCOMES} for cls, counts in table.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labels", nargs="*", default=["tests.wagtail.suite.backends"])
    parser.add_argument("--json", help="write each test's outcome and the summary here")
    parser.add_argument("-v", "--verbosity", type=int, default=1)
    args = parser.parse_args(argv)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.wagtail.suite.settings"

    # Django's loading order: the settings module is chosen above.
    import django
    import wagtail
    from django.test.runner import DiscoverRunner

    django.setup()

    class Runner(DiscoverRunner):
        def get_resultclass(self):
            return Recording

    started = time.monotonic()
    Runner(verbosity=args.verbosity, interactive=False).run_tests(args.labels)
    table = summary(Recording.outcomes)
    print(f"\nWagtail {wagtail.__version__}: passed / differs by design / open / failed / skipped")
    for cls, counts in table.items():
        print(f"  {cls:24} " + " / ".join(str(counts[o]) for o in OUTCOMES))
    print(f"  ({time.monotonic() - started:.0f} s)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "wagtail": wagtail.__version__,
                    "summary": table,
                    "tests": [
                        {"class": c, "test": t, "outcome": o, "detail": d}
                        for c, t, o, d in Recording.outcomes
                    ],
                },
                out,
                indent=1,
            )
    failed = sum(counts["failed"] for counts in table.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
