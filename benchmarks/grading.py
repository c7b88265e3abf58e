"""The admin's grading page (issue: under 1 s for 10 rows and two versions), with
all-MiniLM-L6-v2: the serving top 10 and a fine-tuned candidate's ranking of the serving top 20,
timed end to end through the Django test client (template rendered), over SciFact abstracts
and training claims.

    python -m benchmarks.grading [--rows 1000] [--queries 20] [--json PATH]

Figures: docs/benchmarks.md, "Measuring search quality".
"""

import argparse
import tempfile
import time
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--rows", type=int, default=1000, help="SciFact abstracts loaded")
parser.add_argument("--queries", type=int, default=20, help="claims graded, each three ways")
parser.add_argument("--json", metavar="PATH", type=Path, help="write the figures as JSON")
args = parser.parse_args()
ROWS, QUERIES = args.rows, args.queries

from benchmarks.common import cpu_line, percentile, write_json  # noqa: E402
from benchmarks.django_setup import setup_django  # noqa: E402

print(cpu_line())
models = tempfile.mkdtemp(prefix="grading-models-")
setup_django(
    {
        "ENCODERS": {"default": {"MODEL": "all-MiniLM-L6-v2", "THREADS": 2}},
        "AUTO_EMBED": False,
        "MODEL_DIR": models,
    },
    apps=(
        "tests.testapp",
        "django.contrib.admin",
        "django.contrib.sessions",
        "django.contrib.messages",
    ),
    ROOT_URLCONF="tests.admin.urls",
    ALLOWED_HOSTS=["testserver"],
    SECRET_KEY="bench",
    MIDDLEWARE=[
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    ],
    TEMPLATES=[
        {
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "APP_DIRS": True,
            "OPTIONS": {
                "context_processors": [
                    "django.template.context_processors.request",
                    "django.contrib.auth.context_processors.auth",
                    "django.contrib.messages.context_processors.messages",
                ]
            },
        }
    ],
)
from django.contrib.auth.models import User  # noqa: E402
from django.test import Client  # noqa: E402

from benchmarks import hybrid  # noqa: E402
from benchmarks.search import encode_cached  # noqa: E402
from django_sbert.finetuning import runs  # noqa: E402
from django_sbert.finetuning.execution import execute_run  # noqa: E402
from django_sbert.finetuning.options import Hyperparameters  # noqa: E402
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair  # noqa: E402

rows = hybrid.corpus()[:ROWS]
texts = [hybrid.embedding_text(row) for row in rows]
vectors = encode_cached(texts, len(texts), 2)
hybrid.load_corpus(rows, vectors)
claims = [text for _, text, _ in hybrid.queries_with_qrels()]
# A candidate: a short mnrl run on claim -> abstract pairs of the loaded abstracts.
by_id = {row["id"]: row for row in rows}
pairs = []
for _, text, rel in hybrid.queries_with_qrels():
    pairs += [(text, hybrid.embedding_text(by_id[doc])) for doc in rel if doc in by_id]
    if len(pairs) >= 48:
        break
made = TrainingPair.objects.bulk_create(
    TrainingPair(text_a=a, text_b=b, split="eval" if n % 4 == 0 else "train")
    for n, (a, b) in enumerate(pairs)
)
hyper = Hyperparameters(loss="mnrl", epochs=1, batch_size=8, early_stopping=False)
started = time.perf_counter()
run = runs.create_run("default", [p.pk for p in made], hyperparameters=hyper, enqueue=False)
assert execute_run(run.pk) == RunStatus.SUCCEEDED
candidate = EncoderVersion.objects.get(run=run)
print(
    f"candidate {candidate.version} trained on {len(made)} pairs in "
    f"{time.perf_counter() - started:.0f} s"
)

User.objects.create_superuser("admin", "a@example.com", "pw")
client = Client()
client.login(username="admin", password="pw")
url = "/admin/django_sbert/judgmentlist/grade/"
base = {"name": "bench", "target": "testapp.Article.embedding", "candidate": candidate.version}
page = client.get(url, {**base, "q": "warm up both models"})
assert page.status_code == 200 and page.content.decode().count('class="sbert-side"') == 2
timings = {"two versions, first view": [], "two versions, again": [], "serving only": []}
for claim in claims[:QUERIES]:
    runs_ = (
        ("two versions, first view", {}),
        ("two versions, again", {}),
        ("serving only", {"candidate": ""}),
    )
    for label, extra in runs_:
        t0 = time.perf_counter()
        page = client.get(url, {**base, **extra, "q": claim})
        timings[label].append(time.perf_counter() - t0)
        assert page.status_code == 200
        assert page.content.decode().count('<select name="grade-') >= 10
figures = {}
for label, values in timings.items():
    p50, top = percentile(values, 50) * 1000, max(values) * 1000
    figures[label] = {"p50_ms": round(p50, 1), "max_ms": round(top, 1)}
    print(
        f"grading page, {label}, {ROWS} abstracts, {QUERIES} claims: "
        f"p50 {p50:.0f} ms, max {top:.0f} ms"
    )
if args.json:
    write_json(args.json, {"rows": ROWS, "queries": QUERIES, "grading_page": figures})
