"""Rampup against token buckets whose burst is large against their rate: pushback while it learns.

A crawl spends such a bucket's burst in its first half-second and is then locked out until
the bucket refills one request. That first cycle looks like a window's (its count let through,
then silence), but after it a bucket gives back one request per refill, not its count again.
Paced at the first cycle's rate, each later cycle drew another episode of refused probes:
about as many refusals as pages on a bucket under 1/s. Fake clock, the limiter models of
``test_rampup_limiters``; the parameters are not ones rampup was tuned on.
"""

from __future__ import annotations

import pytest

from tests.test_rampup_limiters import Bucket, crawl


# Before (b251625): after the burst 0.96 / 27 refusals, 0.94 / 16, 0.96 / 27.
@pytest.mark.parametrize(("rate", "burst", "seconds", "refusals"),
                         [(0.7, 8.0, 40.0, 16), (2.6, 14.0, 30.0, 11), (0.45, 10.0, 60.0, 16)])
async def test_a_bucket_whose_burst_is_spent_is_paced_at_its_refill(rate: float, burst: float, seconds: float,
                                                                     refusals: int) -> None:
    out = await crawl(Bucket(rate, burst), seconds)
    after_burst = (out.accepted - burst) / seconds / rate
    assert after_burst >= 0.88, out
    assert out.refused <= refusals, out
