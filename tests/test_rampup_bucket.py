"""Rampup's bucket fit (``policy/_rampup_bucket``): the token buckets a record of sends fits, and the
pace worth keeping after a hold, on plain numbers."""

from __future__ import annotations

import pytest

from crawlpace.policy._rampup_bucket import belief_of, best_level, bucket_fit, chance, flat_fits, joint_fit
from crawlpace.policy.rampup import Rampup
from crawlpace.sim._limits import TokenBucket


def replay(bucket: TokenBucket, sends: list[float]) -> tuple[list[float], list[float]]:
    """The sends a bucket accepts up to the first it refuses (a hold follows: nothing more is sent)."""
    accepted: list[float] = []
    for at in sends:
        if bucket.take(at) > 0.0:
            return accepted, [at]
        accepted.append(at)
    return accepted, []


def test_two_paces_pin_a_bucket_that_one_overshoot_cannot() -> None:
    # A bucket of 8 at 20/s: a quick overshoot from full, then (after a pause that refills it) a pace
    # of 25/s, which it keeps up for 8 / 5 = 1.6 s before refusing.
    bucket = TokenBucket(20.0, 8.0)
    first = [i * 0.02 for i in range(30)]  # 50/s
    accepted, refused = replay(bucket, first)
    one = bucket_fit(accepted, refused, first=True, slack=0.0)
    # One overshoot: a large burst at a low rate fits as well as no burst at a high one.
    assert min(lo for _, lo, _, _ in one) < 5.0 < 40.0 < max(hi for _, _, hi, _ in one)
    second = [10.0 + i * 0.04 for i in range(60)]  # 25/s from a full bucket
    more, refused_more = replay(bucket, second)
    two = bucket_fit(accepted + more, refused + refused_more, first=True, slack=0.0)
    assert [burst for burst, *_ in two] == [8]
    (_, lo, hi, _), = two
    assert lo <= 20.0 * 1.001  # (the bisection finds each bound within 0.1 %)
    assert hi >= 20.0
    assert hi / lo < 1.1


def test_a_refusal_empties_the_bucket_for_every_burst() -> None:
    # A bucket of 2 at 20/s: an overshoot refused at 0.04 s, a 3 s hold, then 25/s until refused again.
    # The record no longer holds the scope's first send (the bucket's level then is unknown), but the
    # refusal says it was empty at 0.04 s: the six sends accepted after the hold need 5 tokens in 3.4 s,
    # whatever the burst. (Replaying each burst from full, a burst of 8 fitted 0.001/s.)
    bucket = TokenBucket(20.0, 2.0)
    accepted, refused = replay(bucket, [i * 0.02 for i in range(60)])
    resumed = refused[0] + 3.0
    more, refused_more = replay(bucket, [resumed + i / 25.0 for i in range(200)])
    fits = bucket_fit(accepted[-1:] + more, refused + refused_more, first=False, slack=0.0)
    least = (len(more) - 1) / (more[-1] - refused[0])
    assert fits
    assert all(lo >= least for _, lo, _, _ in fits)
    assert any(lo <= 20.0 * 1.001 and hi >= 20.0 for _, lo, hi, _ in fits)  # (within the bisection's 0.1 %)


def test_no_refusal_gives_no_fit() -> None:
    assert bucket_fit([0.0, 0.1, 0.2], [], first=True) == []
    assert bucket_fit([0.0, 0.1, 0.2], [-1.0], first=True) == []  # a refusal before the record


def test_the_pace_kept_weighs_the_hold_a_step_risks() -> None:
    # The limit anywhere from 1 to 16/s (one burst, log-uniform): a short hold makes a higher pace
    # worth its risk; a long one a lower pace; a pace known to hold bounds what is risked.
    belief = belief_of([(1, 1.0, 16.0, 1.0)])
    assert chance(belief, 1.0) == 1.0
    assert chance(belief, 4.0) == pytest.approx(0.5, abs=0.02)
    assert chance(belief, 16.0) == pytest.approx(0.0, abs=1e-9)
    bold, _ = best_level(belief, hold=1.0, work=60.0)
    timid, sure = best_level(belief, hold=60.0, work=60.0)
    assert 1.0 <= timid < bold < 16.0
    assert sure > 0.5
    # From a pace kept up (the fallback if the step fails), a step likelier to hold than not.
    step, holds = best_level(belief, hold=10.0, work=60.0, floor=4.0)
    assert step > 4.0
    assert holds >= 0.5


def test_the_pace_weighs_the_time_to_finish_the_work_ahead() -> None:
    # The more work ahead, the more a pace too low costs against a hold: with little work the sure
    # lowest rate finishes soonest; with much, a pace no likelier than not to hold, and a step from a
    # pace kept up that is as likely to fail as not.
    belief = belief_of([(1, 1.0, 16.0, 1.0)])
    assert best_level(belief, hold=60.0, work=6.0) == (1.0, 1.0)
    level, sure = best_level(belief, hold=60.0, work=600.0)
    assert level == pytest.approx(4.0, rel=0.05)
    assert sure == pytest.approx(0.5, abs=0.05)
    step, holds = best_level(belief, hold=10.0, work=600.0, floor=4.0)
    assert step > 8.0
    assert holds < 0.5


def test_a_hold_promises_one_token_per_hold() -> None:
    # A 0.9/s bucket with no burst, pages in milliseconds: the first send accepted, the second (a second
    # later) refused, with a 59 s hold. The record bounds the rate from above only (under 1/s), and the
    # belief spread it over three decades under that: 0.1/s was the pace worth keeping, a ninth of the
    # limit for the rest of the crawl. The hold's end lets a send through, so the bucket refills at
    # least one token in 59 s: the rates under 1/59 s are no fit.
    fits = bucket_fit([0.0], [1.0], first=True)
    least = 1.0 / 59.0
    assert chance(belief_of(fits, least), least) == 1.0
    assert chance(belief_of(fits), least) < 0.6
    level, _ = best_level(belief_of(fits, least), hold=59.0, work=17.0)
    assert level > 0.14  # was 0.097


def test_a_record_cut_short_before_the_first_hold_still_starts_from_a_full_bucket() -> None:
    # A bucket of 4 at 18/s, full at the first send, met by sends ever closer: 94 accepted, then one
    # refused. The record keeps the last 64 accepted; the 30 left off took a token each from the full
    # bucket and none was refused, so the replay may start a burst of b with b - 30 tokens. From one
    # token (the least a bucket that accepts a send holds), the refusal fits every burst over 30 at any
    # rate up to 12.9/s: the belief that the bucket refills 12/s or more is 0.64, where the whole
    # record makes it 0.49.
    bucket = TokenBucket(18.0, 4.0)
    sends: list[float] = []
    at, gap = 0.0, 0.25
    while len(sends) < 200:
        sends.append(at)
        at += gap
        gap = max(0.02, gap * 0.98)
    accepted, refused = replay(bucket, sends)
    assert refused
    assert len(accepted) == 94
    dropped = len(accepted) - 64
    known = bucket_fit(accepted[dropped:], refused, first=False, dropped=dropped, slack=0.0)
    unknown = bucket_fit(accepted[dropped:], refused, first=False, slack=0.0)
    full = bucket_fit(accepted, refused, first=True, slack=0.0)
    tops = {b: hi for b, _, hi, _ in unknown}
    assert all(hi <= tops[b] for b, _, hi, _ in known)
    assert [b for b, _, hi, _ in known if hi < tops[b]] == [37, 46, 57, 64]
    assert any(b == 4 and lo <= 18.0 <= hi for b, lo, hi, _ in known)
    truth = chance(belief_of(full), 12.0)
    assert abs(chance(belief_of(known), 12.0) - truth) < abs(chance(belief_of(unknown), 12.0) - truth) - 0.04


def test_a_step_refused_under_a_hold_narrows_the_belief_whichever_rule_answers() -> None:
    # A fitted level of 46/s stepped to 54/s; the step drew a 9 s hold, and the refusal came 20 ms
    # after an accepted send, which the jitter rule forgives (no cut, so the fit never hears of it).
    # The belief must still learn that the limit is under 54/s, or the same step is weighed again
    # after every hold (holds11: eight holds where two did).
    ramp = Rampup(start_rate=60.0, min_rate=1 / 300, max_rate=100.0, max_concurrency=8, window=60.0,
                  target=(1.0, 1.0))
    ramp.phase, ramp.rate, ramp.ceiling = "steady", 54.0, 54.0
    ramp._kept = 46.0
    ramp._belief = (30.0, 1.0, 46.0, 0.95, 54.0, 0.79, 80.0, 0.0)
    ramp._note_refusal_held(10.42, 10.40, 19.42)
    assert chance(ramp._belief, 54.0) == 0.0
    assert chance(ramp._belief, 46.0) > 0.7
    # A refusal at the pace kept up says nothing of the limit (a bunched send): the belief stands.
    ramp._belief, ramp.rate, ramp.ceiling = (30.0, 1.0, 46.0, 0.95, 54.0, 0.79, 80.0, 0.0), 46.0, 46.0
    ramp._note_refusal_held(30.42, 30.40, 39.42)
    assert chance(ramp._belief, 54.0) == pytest.approx(0.79)


def test_the_first_hold_weighs_each_burst_by_the_rates_the_start_leaves_it() -> None:
    # The random farm's 0.808/s bucket of 4 with 50 s holds (seed 17's holds06), 50 ms answers: the
    # start's window sends 4 through in 0.135 s and the 5th is refused. Bursts of 2 and 3 explain that
    # only with a narrow band of rates over 7/s; the burst of 4 with any rate under 5.6/s.
    accepted, refused = replay(TokenBucket(0.808, 4.0), [i * 0.045 for i in range(10)])
    assert (len(accepted), refused) == (4, [0.18])
    fits = bucket_fit(accepted, refused, first=True, slack=0.0)
    assert [b for b, *_ in fits] == [2, 3, 4]
    least = 1.0 / 50.0  # the hold's promise: a token per hold
    # By 1 / b alone the narrow bands outweigh the burst of 4: a pace of 2/s "holds" at 0.8.
    assert chance(belief_of(fits, least), 2.0) > 0.8
    # Weighed by the rates the record leaves each burst as well, the burst of 4 carries the belief.
    weighed = belief_of(fits, least, evidence=True)
    assert chance(weighed, 2.0) < 0.3
    assert chance(weighed, 0.5) < 0.6


def test_a_stretch_the_record_has_forgotten_still_narrows_the_fit() -> None:
    # The random farm's holds01 (seed 2032204775): 28.5/s, a burst of 5, 37 s holds. The start's
    # overshoot (40/s from a full bucket) fits one narrow band of rates per burst. After the hold, a pace
    # of 30.4/s runs the burst down in 2.6 s, and the record keeps its last 64 sends only: alone, they
    # fit every burst up to 64, each with a lower rate, and a pace of 28/s holds with a chance of about
    # a half (paced at 13.7/s after the second hold). Both stretches together leave the burst of 5 (and
    # one of 64 under 3/s, which the start's overshoot fits as its largest).
    bucket = TokenBucket(28.5, 5.0)
    accepted, refused = replay(bucket, [i / 40.0 for i in range(40)])
    first = bucket_fit(accepted, refused, first=True, slack=0.0)
    resumed = refused[0] + 37.0
    more, refused_more = replay(bucket, [resumed + i / 30.4 for i in range(200)])
    assert len(more) > 64
    second = bucket_fit(more[-64:], refused + refused_more, first=False, slack=0.0)
    assert max(b for b, *_ in second) == 64
    least = 1.0 / 37.0
    assert chance(belief_of(second, least, exact=True), 28.0) < 0.6
    joint = joint_fit(second, flat_fits(first))
    assert [b for b, *_ in joint] == [5, 64]
    assert chance(belief_of(joint, least, exact=True), 28.0) > 0.9
    # Eight even knots over 0.03-28.6/s cannot hold the band [28.48, 28.56]/s: the exact belief keeps
    # its ends (the even knots read a chance under 0.1 at 28/s).
    assert chance(belief_of(joint, least), 28.0) < 0.1
    # A burst no rate fits both times (the limit moved): the record now stands alone.
    assert joint_fit(second, flat_fits([(5, 60.0, 70.0, 0.2)])) == second
