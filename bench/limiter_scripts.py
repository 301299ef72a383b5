"""Scripted requests against real limiters on loopback and against the simulator's model of each.

Run it as ``python bench/limiter_scripts.py`` (about a minute; ``--quick`` for fewer rounds,
``--json`` for a machine-readable last line, ``--cases NAME,NAME`` for some of them). It starts
each limiter the way ``bench/real_limiters.py`` does (nginx and HAProxy from their Debian
packages, a threaded Python backend where one is needed) and sends it a fixed script, each
request on its own connection (``Connection: close``), noting when it went and when its whole
answer was read. The simulator's model of that limiter is then fed the same send times and
asked for its answers:

* **nginx-queue**: ``limit_req rate=10r/s burst=5`` (no ``nodelay``: the excess waits in line)
  against :class:`~crawlpace.sim._limits.RequestQueue` (the ``queue`` profile);
  **nginx-queue-delay** the same with ``delay=2`` (nginx's two-stage form);
  **nginx-nodelay** ``burst=3 nodelay`` against the same model with ``delay=burst`` (the
  ``bucket`` kind's token bucket of ``burst + 1``). The script: 10 at once, then 12 sent 50 ms
  apart (twice the rate), then 3 at once and 2 more 250 ms later. Compared: the status of each
  request, and how long nginx held each accepted one (its answer less its send) beside the
  model's wait.
* **haproxy-conn-cur** (``conn_cur`` over 2, ``option httpclose``, a 100 ms backend) and
  **nginx-conn** (``limit_conn`` 2, the same backend) against :class:`~crawlpace.sim._limits.SlotCap`:
  four requests at once (two taken, two refused); then two requests hold both slots, and the
  moment the first answer is read, a third request is sent
  after a gap of 0 to 20 ms. Whether it is refused, over several rounds per gap, says how long
  after its answer the limiter frees a slot: the ``lag`` of the ``conncap`` profile.

Times on a loaded machine move by a few milliseconds; the statuses are what must agree.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

import real_limiters  # noqa: E402
from crawlpace.sim._limits import RequestQueue, SlotCap  # noqa: E402

#: The queue script: (seconds from the start, requests sent at once).
QUEUE_SCRIPT: tuple[tuple[float, int], ...] = (
    (0.0, 10), *((1.5 + 0.05 * step, 1) for step in range(12)), (4.0, 3), (4.25, 2))
#: Gaps, in seconds, between reading an answer and the next send, in the slot scripts.
SLOT_GAPS = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02)
SLOT_ROUNDS, QUICK_SLOT_ROUNDS = 8, 3
#: Seconds between a request's send and the model's wait that still count as the same time.
TIME_TOLERANCE = 0.02


@dataclass
class Answer:
    """One scripted request: when it went, its status, when its answer was read (monotonic seconds)."""

    sent: float
    status: int
    answered: float


async def get(port: int, path: str, sent_at: Callable[[float], None] | None = None) -> Answer:
    """``GET path`` on a new connection, ``Connection: close``; the answer read to its length."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode("ascii"))
        sent = time.monotonic()
        if sent_at is not None:
            sent_at(sent)
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length:
            await reader.readexactly(length)
        return Answer(sent, status, time.monotonic())
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


@dataclass
class Outcome:
    """One case: how far the real limiter and the model agree."""

    case: str
    requests: int = 0
    same_status: int = 0
    #: The most a real wait (answer less send) of an accepted request differs from the model's.
    worst_wait_gap: float | None = None
    #: Per slot gap (ms): refused share over the rounds, real and model.
    refused_by_gap: dict[str, list[float]] = field(default_factory=dict)
    fitted_lag: float | None = None
    rows: list[list[Any]] = field(default_factory=list)


async def queue_script(port: int) -> list[Answer]:
    start = time.monotonic() + 0.1
    tasks: list[asyncio.Task[Answer]] = []
    number = 0
    for offset, count in QUEUE_SCRIPT:
        await asyncio.sleep(max(start + offset - time.monotonic(), 0.0))
        for _ in range(count):
            number += 1
            tasks.append(asyncio.create_task(get(port, f"/page/{number}")))
        await asyncio.sleep(0)  # let them write before the next step
    return list(await asyncio.gather(*tasks))


def compare_queue(name: str, answers: list[Answer], model: RequestQueue) -> Outcome:
    outcome = Outcome(name, requests=len(answers))
    worst = 0.0
    origin = min(answer.sent for answer in answers)
    for answer in sorted(answers, key=lambda a: a.sent):
        wait = model.take(answer.sent)
        expected = 200 if wait is not None else 0
        real_wait = answer.answered - answer.sent
        same = (answer.status == 200) == (expected == 200)
        outcome.same_status += same
        if answer.status == 200 and wait is not None:
            worst = max(worst, abs(real_wait - wait))
        outcome.rows.append([round(answer.sent - origin, 4), answer.status, round(real_wait, 4),
                             None if wait is None else round(wait, 4)])
    outcome.worst_wait_gap = round(worst, 4)
    return outcome


async def slot_script(port: int, gap: float) -> tuple[bool, float]:
    """Two requests fill a cap of 2; ``gap`` after the first answer, a third: was it refused?"""
    first = asyncio.create_task(get(port, "/page/1"))
    second = asyncio.create_task(get(port, "/page/2"))
    answer = await first
    if gap:
        await asyncio.sleep(gap)
    third = await get(port, "/page/3")
    await second
    return third.status != 200, third.sent - answer.answered


#: Requests sent at once on a cap of 2.
BURST = 4


async def burst(port: int, count: int) -> list[int]:
    """``count`` requests at once, each on its own connection: their statuses, sorted."""
    answers = await asyncio.gather(*(get(port, f"/page/{number}") for number in range(1, count + 1)))
    return sorted(answer.status for answer in answers)


def slot_model(lag: float, waited: float) -> bool:
    """The model's answer to the same script: refused when the slot is not yet free."""
    cap = SlotCap(2, lag)
    cap.acquire(0.0)
    cap.acquire(0.0)
    cap.release(0.1)
    return not cap.acquire(0.1 + waited)


def run(case: real_limiters.Case, root: Path, rounds: int) -> Outcome:
    limiter = real_limiters.start_limiter(case, root / case.name, 40)
    port = int(limiter.base.rsplit(":", 1)[1])
    try:
        if case.name.startswith("nginx-") and "limit_req" in case.config:
            answers = asyncio.run(queue_script(port))
            line, at_once = case.config["model"]
            return compare_queue(case.name, answers, RequestQueue(case.rate, line, at_once))
        outcome = Outcome(case.name)
        # Four at once on a cap of 2: the model takes the first two and refuses the others.
        slots = SlotCap(2)
        expected = sorted(200 if slots.acquire(0.0) else 503 for _ in range(BURST))
        for _ in range(rounds):
            statuses = asyncio.run(burst(port, BURST))
            outcome.requests += BURST
            outcome.same_status += sum(real == model for real, model in zip(statuses, expected, strict=True))
            outcome.rows.append(["at once", statuses])
            time.sleep(0.15)
        tries: list[tuple[float, bool, float]] = []
        for gap in SLOT_GAPS:
            for _ in range(rounds):
                refused, waited = asyncio.run(slot_script(port, gap))
                tries.append((gap, refused, waited))
                time.sleep(0.12)  # the second request's slot comes back
        # The lag that explains the most answers, from the measured waits: refused iff waited < lag.
        candidates = sorted({0.0, *(waited + 1e-4 for _gap, _refused, waited in tries)})
        lag = max(candidates, key=lambda lag: (sum(slot_model(lag, w) == r for _g, r, w in tries), -lag))
        outcome.fitted_lag = round(lag, 4)
        outcome.requests += len(tries)
        outcome.same_status += sum(slot_model(lag, waited) == refused for _gap, refused, waited in tries)
        for gap in SLOT_GAPS:
            mine = [(refused, waited) for g, refused, waited in tries if g == gap]
            outcome.refused_by_gap[f"{gap * 1000:g}"] = [
                round(sum(r for r, _w in mine) / len(mine), 2),
                round(sum(slot_model(lag, w) for _r, w in mine) / len(mine), 2)]
        outcome.rows += [[gap, refused, round(waited, 4)] for gap, refused, waited in tries]
        return outcome
    finally:
        real_limiters.stop(limiter.processes)


CASES = (
    real_limiters.Case("nginx-queue", "nginx", 10.0, 1, 0.1,
                       config={"limit_req": " burst=5", "model": (5, 0)}),
    real_limiters.Case("nginx-queue-delay", "nginx", 10.0, 1, 0.1,
                       config={"limit_req": " burst=5 delay=2", "model": (5, 2)}),
    real_limiters.Case("nginx-nodelay", "nginx", 10.0, 1, 0.1,
                       config={"limit_req": " burst=3 nodelay", "model": (3, 3)}),
    real_limiters.Case("haproxy-conn-cur", "haproxy", 20.0, 2, 0.0, backend_delay=0.1,
                       config={"conn_cur": 2}),
    real_limiters.Case("nginx-conn", "nginx", 20.0, 2, 0.0, backend_delay=0.1, config={"limit_conn": 2}),
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SLOT_ROUNDS} rounds per slot gap")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--cases", default=None, help=f"comma-separated: {', '.join(c.name for c in CASES)}")
    parser.add_argument("--workdir", default=None, help="keep every config and log here")
    args = parser.parse_args(argv)
    wanted = None if args.cases is None else {name.strip() for name in args.cases.split(",") if name.strip()}
    unknown = (wanted or set()) - {case.name for case in CASES}
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(sorted(unknown))}; choose from: "
                         f"{', '.join(case.name for case in CASES)}")
    rounds = QUICK_SLOT_ROUNDS if args.quick else SLOT_ROUNDS
    started = time.monotonic()
    outcomes: list[Outcome] = []
    skipped: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        root = (Path(args.workdir).resolve() if args.workdir
                else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="limiter-scripts-"))))
        root.mkdir(parents=True, exist_ok=True)
        for case in CASES:
            if wanted is not None and case.name not in wanted:
                continue
            why = real_limiters.missing(case)
            if why:
                skipped[case.name] = why
                print(f"  {case.name}: skipped: {why}", flush=True)
                continue
            outcome = run(case, root, rounds)
            outcomes.append(outcome)
            if args.json:
                continue
            print(f"\n{case.name}: {outcome.same_status} of {outcome.requests} answers as the model's",
                  flush=True)
            if outcome.fitted_lag is None:
                print("| sent (s) | status | held (s) | model's wait (s) |")
                print("|--:|--:|--:|--:|")
                for sent, status, held, wait in outcome.rows:
                    model = "refused" if wait is None else f"{wait:.3f}"
                    print(f"| {sent:.3f} | {status} | {held:.3f} | {model} |")
                print(f"worst gap between a real hold and the model's wait: {outcome.worst_wait_gap:.3f} s")
            else:
                print(f"fitted lag: {outcome.fitted_lag * 1000:.1f} ms; "
                      "refused share by gap (ms), real / model:")
                print(", ".join(f"{gap}: {real:.2f}/{model:.2f}"
                                for gap, (real, model) in outcome.refused_by_gap.items()))
    print(f"\nwhole benchmark: {time.monotonic() - started:.1f} s")
    if args.json:
        print(json.dumps({"benchmark": "limiter_scripts", "quick": args.quick,
                          "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                          "python": platform.python_version(), "skipped": skipped,
                          "results": [asdict(outcome) for outcome in outcomes],
                          "seconds": round(time.monotonic() - started, 1)}, sort_keys=True))


if __name__ == "__main__":
    main()
