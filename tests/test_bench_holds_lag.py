"""``bench/holds_battery.py``'s ``lag``: sends reach the site late, so paced sends can arrive bunched."""

from __future__ import annotations

from dataclasses import dataclass, field

from .bench_scripts import load_bench

holds_battery = load_bench("holds_battery", "holds_battery.py")


@dataclass
class Arrivals:
    """A site with no limit that notes when each request reached it."""

    at: list[float] = field(default_factory=list)

    def arrive(self, now: float) -> object:
        self.at.append(now)
        return holds_battery.Answer(200)


async def test_a_crawl_with_lag_reaches_the_site_late_and_bunched() -> None:
    plain, lagged = Arrivals(), Arrivals()
    took, sent, refused = await holds_battery.crawl_site(plain, 40, 0.003)
    took_lagged, _, _ = await holds_battery.crawl_site(lagged, 40, 0.003, lag=0.2)
    assert (sent, refused) == (40, 0)
    # The first send goes at 0: without lag it arrives then, with it a drawn time later.
    assert plain.at[0] == 0.0
    assert lagged.at[0] > 0.0
    assert took_lagged > took
    # Paced sends arrive as they went without lag (the start's one a second, then quicker, never
    # closer than the pacing lets them); with it some arrive closer together than any two did.
    plain_gaps = [b - a for a, b in zip(plain.at, plain.at[1:], strict=False)]
    gaps = [b - a for a, b in zip(lagged.at, lagged.at[1:], strict=False)]
    assert min(gaps) < min(plain_gaps)


async def test_a_bucket_fitted_after_a_hold_is_not_paced_past_its_fit_by_the_slots() -> None:
    # A 5.44/s bucket of 1 whose refusals ask for 11 s of quiet, 50 ms pages, each send 50 ms late on
    # average: under lag the pages look slow, and the load fit's slots lifted the rate past what the
    # count they held serves, 43/s, right after each hold's fit paced it at 2.3/s; every hold's end drew
    # the next hold (53 holds, 600 s, the cap). Held under the fit, the crawl draws a few.
    site = holds_battery.HeldBucket(5.44, 1.0, 11)
    took, _, refused = await holds_battery.crawl_site(site, 109, 0.05, lag=0.05)
    assert site.holds <= 6
    assert refused <= 10
    assert took < 150.0
