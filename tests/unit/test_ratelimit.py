from ingest.ratelimit import HOUR_MS, BlockList, RateLimiter

T0 = 1_800_000_000_000 - (1_800_000_000_000 % HOUR_MS)  # the start of a clock hour


def limiter(per_second: float = 1000) -> RateLimiter:
    return RateLimiter(site_events_per_second=per_second)


def test_a_client_gets_its_hourly_page_views_and_no_more() -> None:
    rl = limiter()
    verdicts = [
        rl.check(client_hash="c", site_id="s", pageviews=1, events=1, client_limit_per_hour=100, now_ms=T0 + i)
        for i in range(101)
    ]
    assert all(v.allowed for v in verdicts[:100])
    assert not verdicts[100].allowed
    assert verdicts[100].retry_after_s == 3600  # until the next clock hour
    assert "100 page views per hour" in verdicts[100].reason


def test_other_clients_and_the_next_hour_are_not_affected() -> None:
    rl = limiter()
    for i in range(5):
        rl.check(client_hash="c", site_id="s", pageviews=1, events=1, client_limit_per_hour=5, now_ms=T0 + i)
    assert not rl.check(client_hash="c", site_id="s", pageviews=1, events=1, client_limit_per_hour=5, now_ms=T0).allowed
    assert rl.check(client_hash="d", site_id="s", pageviews=1, events=1, client_limit_per_hour=5, now_ms=T0).allowed
    next_hour = T0 + HOUR_MS
    assert rl.check(
        client_hash="c", site_id="s", pageviews=1, events=1, client_limit_per_hour=5, now_ms=next_hour
    ).allowed


def test_engagement_and_custom_events_do_not_use_the_page_view_allowance() -> None:
    rl = limiter()
    for i in range(50):
        assert rl.check(
            client_hash="c", site_id="s", pageviews=0, events=1, client_limit_per_hour=1, now_ms=T0 + i
        ).allowed


def test_a_site_is_held_to_its_events_per_second() -> None:
    rl = limiter(per_second=10)
    results = [
        rl.check(client_hash=f"c{i}", site_id="s", pageviews=0, events=1, client_limit_per_hour=9, now_ms=T0).allowed
        for i in range(12)
    ]
    assert results.count(True) == 10
    assert rl.check(
        client_hash="x", site_id="s", pageviews=0, events=1, client_limit_per_hour=9, now_ms=T0 + 1000
    ).allowed


def test_a_published_block_refuses_the_client_until_it_expires_or_is_lifted() -> None:
    blocks = BlockList()
    rl = RateLimiter(site_events_per_second=1000, blocks=blocks)
    blocks.update("c", T0 + 60_000)
    verdict = rl.check(client_hash="c", site_id="s", pageviews=1, events=1, client_limit_per_hour=100, now_ms=T0)
    assert not verdict.allowed and verdict.retry_after_s == 60
    assert rl.check(
        client_hash="c", site_id="s", pageviews=1, events=1, client_limit_per_hour=100, now_ms=T0 + 60_001
    ).allowed
    blocks.update("c", T0 + 120_000)
    blocks.update("c", None)
    assert rl.check(client_hash="c", site_id="s", pageviews=1, events=1, client_limit_per_hour=100, now_ms=T0).allowed
