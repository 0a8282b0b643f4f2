"""runtime/breaker.py: with the API server away, one probe at a time, not one retry per resource."""

from __future__ import annotations

from pooling_operator.runtime.breaker import MAX_PAUSE_SECONDS, WAIT_FOR_PROBE_SECONDS, Breaker


def test_closed_until_the_api_server_is_unreachable() -> None:
    b = Breaker()
    assert b.wait(0) == 0
    b.failed(409, 0)  # a conflict is an answer
    b.failed(429, 0)
    assert not b.open and b.wait(0) == 0


def test_an_outage_holds_everyone_and_lets_one_probe_through_with_backoff() -> None:
    b = Breaker()
    for _ in range(16):  # every worker's request in flight fails at once: one outage, counted once
        b.failed(0, 10.0)
    assert b.open and b.pause == 1.0 and b.wait(10.5) == 0.5
    assert b.wait(11.0) == 0  # due: this caller is the probe
    assert b.wait(11.0) == WAIT_FOR_PROBE_SECONDS  # everyone else waits for it
    pauses = []
    now = 11.0
    for _ in range(6):
        b.failed(503, now)  # the probe fails: the pause doubles up to its bound
        pauses.append(b.pause)
        now = b.until
        assert b.wait(now) == 0
    assert pauses == [2.0, 4.0, 8.0, MAX_PAUSE_SECONDS, MAX_PAUSE_SECONDS, MAX_PAUSE_SECONDS]
    b.succeeded()
    assert not b.open and b.wait(now) == 0


def test_a_probe_that_gets_any_answer_closes_it() -> None:
    b = Breaker()
    b.failed(0, 0.0)
    assert b.wait(1.0) == 0
    b.failed(422, 1.0)  # refused, but answered
    assert not b.open


def test_requests_per_outage_minute_are_bounded_whatever_the_number_of_resources() -> None:
    """A worker loop over 1,000 keys for one simulated minute of outage: what reaches the API server is the
    probes (about one per MAX_PAUSE_SECONDS), not a retry per key."""
    b = Breaker()
    b.failed(0, 0.0)
    due = {key: 0.0 for key in range(1000)}
    sent, now = 0, 0.0
    while now < 60.0:
        for key, at in due.items():
            if at > now:
                continue
            hold = b.wait(now)
            if hold:
                due[key] = now + hold
                continue
            sent += 1
            b.failed(0, now)  # still down
            due[key] = now + b.pause
        now += 0.1
    assert sent <= 60 / MAX_PAUSE_SECONDS + 4, sent
