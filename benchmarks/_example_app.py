"""The example project's ``articles`` app, installed from the repository root.

``benchmarks.passages`` loads its tables (``Article`` with ``passages=True`` and its passage
table). The app calls itself ``articles``, a name importable only from inside
example_project/; this config imports it as ``example_project.articles`` and keeps the label,
so its migrations and tables are the ones the example project uses.
"""

from example_project.articles.apps import ArticlesConfig


class ExampleArticlesConfig(ArticlesConfig):
    name = "example_project.articles"
    label = "articles"
