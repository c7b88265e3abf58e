"""A task that reaches a worker process while its encoders are still warming up waits for the
warm-up (``serving.worker``): two threads compiling one graph at once failed inside Dynamo."""

from __future__ import annotations

import threading

import pytest
from celery.signals import task_prerun

from django_sbert.serving import worker


def run_task_prerun(done: list[str]) -> threading.Thread:
    def task() -> None:
        task_prerun.send(sender=None, task_id="t", task=None, args=(), kwargs={})
        done.append("task")

    thread = threading.Thread(target=task)
    thread.start()
    return thread


def test_a_task_waits_until_the_warm_up_has_finished(monkeypatch):
    release = threading.Event()
    order: list[str] = []

    def slow_warm_up(names, threads):
        release.wait(10)
        order.append("warm-up")

    monkeypatch.setattr(worker, "_warm_encoders", slow_warm_up)
    worker._warm.clear()  # what prepare_worker_process does before starting the thread
    warming = threading.Thread(target=worker._warm_up, args=(["default"], 1))
    warming.start()
    task = run_task_prerun(order)
    task.join(0.5)
    assert task.is_alive() and order == []  # held while the warm-up runs
    release.set()
    task.join(10)
    warming.join(10)
    assert order == ["warm-up", "task"]


def test_a_failed_warm_up_does_not_hold_tasks(monkeypatch):
    def broken(names, threads):
        raise RuntimeError("no model files")

    monkeypatch.setattr(worker, "_warm_encoders", broken)
    worker._warm.clear()
    with pytest.raises(RuntimeError):
        worker._warm_up(["default"], 1)
    order: list[str] = []
    run_task_prerun(order).join(5)
    assert order == ["task"]


def test_without_a_warm_up_tasks_run_at_once():
    assert worker._warm.is_set()
    order: list[str] = []
    run_task_prerun(order).join(5)
    assert order == ["task"]
