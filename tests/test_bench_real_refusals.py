"""``bench/real_refusals.py``'s reading of a stamped crawl log, on a log written by hand."""

from __future__ import annotations

from pathlib import Path

from .bench_scripts import load_bench

refusals = load_bench("_bench_real_refusals", "real_refusals.py")

GET = "INFO crawlpace.crawl._fetch: GET http://127.0.0.1:1/page/{} -> {} (48 bytes, {} s)"
RULE = "DEBUG crawlpace.policy.rampup: scope 127.0.0.1 rampup {}"
LOG = [
    f"100.0000 {GET.format(1, 200, '0.010')}",   # sent 99.99: the crawl's first request
    f"100.5000 {GET.format(2, 200, '0.010')}",   # sent 100.49, answered after the refusal sent at 100.48
    f"100.4900 {GET.format(3, 429, '0.001')}",   # sent 100.489: the first refusal
    f"100.4900 {RULE.format('cut: pushback at 40/s')}",
    f"100.4925 {GET.format(4, 429, '0.003')}",   # sent 100.4895, before the first came back: in flight
    f"100.6000 {GET.format(5, 429, '0.001')}",   # a probe
    f"100.6000 {RULE.format('episode: a refusal of the same overshoot')}",
    f"101.0000 {GET.format(6, 200, '0.010')}",   # sent 100.99: the lock-out's end
    f"103.0000 {GET.format(7, 429, '0.001')}",   # later
]


def test_refusals_are_put_in_the_overshoot_the_lock_out_or_later(tmp_path: Path) -> None:
    log = tmp_path / "crawl.out"
    log.write_text("\n".join(["INFO crawlpace._throttle._throttler: limits", *LOG]) + "\n", encoding="utf-8")
    sends = refusals.read_sends(log)
    assert [send.status for send in sends] == [200, 200, 429, 429, 429, 200, 429]
    assert sends[2].decision == "cut: pushback at 40/s"
    assert sends[3].decision == ""
    out = refusals.attribute(sends)
    assert out["classes"] == {"first": 1, "in flight": 1, "lock-out": 1, "later": 1}
    assert [row["class"] for row in out["refusals"]] == ["first", "in flight", "lock-out", "later"]
    assert out["first_refusal"] == 0.499
    assert out["accepted_before"] == 1
    assert out["lockout_end"] == 1.0
    # At the first refusal's send (100.489) page 1 is done and page 2 not yet sent; the refusal in flight
    # (sent 100.4895) finds the first one out.
    assert [row["in_flight"] for row in out["refusals"]] == [0, 1, 0, 0]
