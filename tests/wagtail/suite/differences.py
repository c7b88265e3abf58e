"""Which of Wagtail's backend tests differ from it by design, per mode, and why; and which
still fail (to fix). Plain data, importable without the suite's models: docs/wagtail.md's
table "Wagtail's backend tests that differ, and why" must say the same (test_suite.py)."""

from __future__ import annotations

# Vector and hybrid modes: a search finds every object with a vector, best first; the suite
# expects only the objects holding the words. Each is right when the suite's assertions hold
# on the first N results, N the number of objects holding the words (sorted by the queryset's
# order: the first N by meaning, in that order).
# Why each differs: what the suite does not expect in the results.
COUNT = "the count of every object (it equals the results)"
FILTERED = "the filtered objects without the words too"
COMPOUND = "And/Or of words: every object, those the words select first"
ALL_WORDS = "objects without every word, or without the phrase, too"
WORD = "objects without the word, or the word's start, too"
RELATED = "objects whose related or callable fields lack the words too"
ORDER = "the order is by meaning, and every object follows"
SORTED = "every object, in the queryset's order"
_BY_MEANING = {
    "test_order_by_expression": SORTED,
    "test_order_by_relevance_false_with_no_ordering_set": SORTED,
    "test_order_by_relevance_false_with_real_search": SORTED,
    "test_order_by_relevance_sliced": SORTED,
    "test_order_by_time": SORTED,
    "test_search_via_queryset_with_order_by_param": SORTED,
    "test_add_bulk": COUNT,
    "test_and": COMPOUND,
    "test_count_cache": COUNT,
    "test_filter_on_related_fields_foreign_key": FILTERED,
    "test_filter_on_related_fields_forward_many_to_many": FILTERED,
    "test_filter_on_related_fields_one_to_many": FILTERED,
    "test_filter_on_related_fields_one_to_one": FILTERED,
    "test_filter_on_related_fields_reverse_many_to_many": FILTERED,
    "test_get_ancestors_filter": FILTERED,
    "test_get_children_filter": FILTERED,
    "test_get_descendants_filter": FILTERED,
    "test_get_root_nodes_filter": FILTERED,
    "test_get_siblings_filter": FILTERED,
    "test_incomplete_plain_text": WORD,
    "test_negated_and": COMPOUND,
    "test_negated_or": COMPOUND,
    "test_or": COMPOUND,
    "test_plain_text_multiple_words_and": ALL_WORDS,
    "test_plain_text_multiple_words_or": WORD,
    "test_plain_text_operator_case": ALL_WORDS,
    "test_plain_text_single_word": WORD,
    "test_ranking": ORDER,
    "test_refresh_all_indexes": COUNT,
    "test_results_cache": COUNT,
    "test_search_and_match_all": COMPOUND,
    "test_search_and_operator": ALL_WORDS,
    "test_search_boosting_on_related_fields": ORDER,
    "test_search_callable_field": RELATED,
    "test_search_child_class_field_from_parent": RELATED,
    "test_search_count": COUNT,
    "test_search_does_not_return_results_from_wrong_model": WORD,
    "test_search_on_nested_related_fields": RELATED,
    "test_search_on_related_fields": RELATED,
    "test_search_on_related_fields_reverse_one_to_one": RELATED,
    "test_search_or_match_none": COMPOUND,
    "test_search_simple": WORD,
    "test_search_via_queryset": WORD,
    "test_search_via_queryset_with_filter": FILTERED,
    "test_search_with_time_lt_filter": FILTERED,
}
DIFFERS: dict[str, dict[str, str]] = {
    "keyword": {},
    "vector": {**_BY_MEANING, "test_boost": ORDER, "test_operators_combination": COMPOUND},
    "hybrid": {**_BY_MEANING, "test_boost": ORDER, "test_operators_combination": COMPOUND},
}

# Failing, not by design: still to fix (docs/wagtail.md lists them too).
OPEN: dict[str, dict[str, str]] = {"keyword": {}, "vector": {}, "hybrid": {}}
