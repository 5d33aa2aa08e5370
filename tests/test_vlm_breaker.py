"""After a worker lost to the VLM the next attempt goes without it; after three in a row, every one does."""

from __future__ import annotations

from appliance.vlm_breaker import VlmBreaker


def test_an_attempt_that_lost_its_worker_is_followed_by_one_without_the_vlm() -> None:
    breaker = VlmBreaker(limit=3)
    assert breaker.skip_reason("a") is None
    breaker.worker_lost("a", "worker killed by SIGSEGV", requeued=True)
    assert breaker.skip_reason("a") == "the previous attempt lost its worker: worker killed by SIGSEGV"
    breaker.finished("a")
    assert breaker.skip_reason("a") is None  # a later attempt (after a restart of the job) may again
    assert breaker.disabled is None


def test_three_losses_in_a_row_leave_the_vlm_out_of_every_attempt() -> None:
    breaker = VlmBreaker(limit=3)
    for job in ("a", "b", "c"):
        assert breaker.skip_reason(job) is None
        breaker.worker_lost(job, "worker killed by SIGABRT", requeued=False)
    assert breaker.disabled is not None and "3 documents in a row" in breaker.disabled
    assert breaker.skip_reason("d") == breaker.disabled


def test_a_document_read_with_the_vlm_breaks_the_run() -> None:
    breaker = VlmBreaker(limit=3)
    for job in ("a", "b"):
        breaker.skip_reason(job)
        breaker.worker_lost(job, "worker killed by SIGABRT", requeued=False)
    breaker.skip_reason("c")
    breaker.finished("c")
    for job in ("d", "e"):
        breaker.skip_reason(job)
        breaker.worker_lost(job, "worker killed by SIGABRT", requeued=False)
    assert breaker.disabled is None


def test_losses_of_attempts_without_the_vlm_do_not_count() -> None:
    breaker = VlmBreaker(limit=2)
    breaker.skip_reason("a")
    breaker.worker_lost("a", "worker killed by SIGSEGV", requeued=True)
    assert breaker.skip_reason("a") is not None  # this attempt goes without the VLM
    breaker.worker_lost("a", "worker killed by SIGSEGV", requeued=True)  # it was not the VLM
    assert breaker.disabled is None
