"""Where a real limiter's refusals fall in one crawl: the first 429, the sends in flight, the probes.

Runs ``bench/real_limiters.py --debug-log`` for one case (HAProxy's ``http_req_rate`` by default) with
each line of the crawl's log stamped with its wall time, then reads the crawl's own log (``crawl.out``):
every answer's time less its latency is the send, and the rampup decision logged after an answer is the
rule that read it. (HAProxy's log cannot time the probes: its ``%Ts`` is the accept date, which on a
keep-alive connection is when the connection went idle, ``counters11.md``.)

Each refusal is put in one class, counted from the crawl's first request:

* **first**: the first refusal;
* **in flight**: sent before the first refusal came back (the start's overshoot);
* **lock-out**: sent after it and before the first send that was accepted after it (the probes);
* **later**: the rest (later windows, later lock-outs).

The stamp comes from a ``sitecustomize`` module put first on the crawl's ``PYTHONPATH`` (in the work
folder): it prefixes the log format with ``%(created)`` and changes nothing else. Real HTTP on loopback: on a
loaded machine the figures give a direction only; the load is printed beside each run.

    PYTHONPATH=src python bench/real_refusals.py [--case haproxy-req-rate] [--seconds 15] [--runs 3]
        [--workdir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spawn_env import pinned_pythonpath

STAMP = '''"""bench/real_refusals.py: stamp every log line with its wall time (nothing else changes)."""
import logging

_init = logging.Formatter.__init__


def _stamped(self, fmt=None, *args, **kwargs):
    if fmt and "%(created)" not in fmt:
        fmt = "%(created).4f " + fmt
    _init(self, fmt, *args, **kwargs)


logging.Formatter.__init__ = _stamped
'''
FETCH = re.compile(r"([\d.]+) INFO crawlpace\.crawl\._fetch: GET \S+? -> (\d+) \(\d+ bytes, ([\d.]+) s\)")
DECISION = re.compile(r"[\d.]+ DEBUG crawlpace\.policy\.rampup: scope \S+ rampup (.*)")
REFUSALS = frozenset({429, 503})


@dataclass
class Send:
    """One answered request of the crawl: its send and answer times, its status, the rule read after it."""

    sent: float
    answered: float
    status: int
    decision: str = ""


def read_sends(log: Path) -> list[Send]:
    """The crawl's answered requests in the order their answers were logged."""
    sends: list[Send] = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        fetched = FETCH.match(line)
        if fetched:
            answered, latency = float(fetched[1]), float(fetched[3])
            sends.append(Send(answered - latency, answered, int(fetched[2])))
            continue
        decided = DECISION.match(line)
        if decided and sends and not sends[-1].decision:
            sends[-1].decision = decided[1]
    return sends


def attribute(sends: list[Send]) -> dict[str, Any]:
    """Each refusal's class, time and count in flight (see the module's docstring)."""
    refused = [send for send in sends if send.status in REFUSALS]
    if not sends or not refused:
        return {"refusals": [], "classes": {}, "lockout_end": None}
    zero, first = min(send.sent for send in sends), refused[0]
    after = [send.sent for send in sends if send.status not in REFUSALS and send.sent > first.answered]
    resumed = min(after) if after else float("inf")
    rows, classes = [], {"first": 0, "in flight": 0, "lock-out": 0, "later": 0}
    for send in refused:
        kind = ("first" if send is first else "in flight" if send.sent < first.answered
                else "lock-out" if send.sent < resumed else "later")
        classes[kind] += 1
        flying = sum(1 for other in sends if other is not send and other.sent <= send.sent < other.answered)
        rows.append({"sent": round(send.sent - zero, 3), "class": kind, "in_flight": flying,
                     "decision": send.decision})
    return {"refusals": rows, "classes": classes,
            "first_refusal": round(first.sent - zero, 3),
            "accepted_before": sum(1 for send in sends
                                   if send.status not in REFUSALS and send.sent < first.sent),
            "lockout_end": round(resumed - zero, 3) if after else None}


def run(case: str, seconds: float, folder: Path) -> dict[str, Any]:
    """One ``real_limiters`` run of ``case`` with stamped crawl logs in ``folder``; its figures."""
    stamp = folder / "stamp"
    stamp.mkdir(parents=True)
    (stamp / "sitecustomize.py").write_text(STAMP, encoding="utf-8")
    path = pinned_pythonpath(os.environ.get("PYTHONPATH"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stamp), path]))
    load = os.getloadavg()[0]
    bench = Path(__file__).resolve().parent / "real_limiters.py"
    command = [sys.executable, str(bench), "--cases", case, "--seconds", f"{seconds:g}",
               "--workdir", str(folder / "run"), "--debug-log", "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"real_limiters gave no figures: {done.stderr[-400:]}")
    figures = next(row for row in json.loads(lines[-1])["results"] if row["contender"] == "crawlpace")
    out = attribute(read_sends(folder / "run" / f"{case}-crawlpace" / "crawl.out"))
    out.update(load=f"{load:.1f}-{os.getloadavg()[0]:.1f}", refused=figures["refused"],
               requests=figures["requests"], over_oracle=figures["over_oracle"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="haproxy-req-rate", help="one case of bench/real_limiters.py")
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds of pages at the limit")
    parser.add_argument("--runs", type=int, default=1, help="crawls, one after the other")
    parser.add_argument("--workdir", default=None, help="keep every log here (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--quick", action="store_true", help="one crawl of 8 s (under a minute)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.runs = min(args.seconds, 8.0), 1
    root = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="real_refusals_"))
    runs = []
    for number in range(1, args.runs + 1):
        out = run(args.case, args.seconds, root / f"r{number}")
        runs.append(out)
        print(f"run {number} (load {out['load']}): {out['refused']} refused of {out['requests']}, "
              f"{out['over_oracle']} x the oracle; {out['classes']}; first refusal at "
              f"{out['first_refusal']} s after {out['accepted_before']} accepted, first accepted send "
              f"after it at {out['lockout_end']} s")
        for row in out["refusals"]:
            print(f"  {row['sent']:8.3f} s  {row['class']:9s}  in flight {row['in_flight']}  "
                  f"| {row['decision'][:100]}")
    if args.json:
        print(json.dumps({"benchmark": "real_refusals", "case": args.case, "seconds": args.seconds,
                          "runs": runs}))


if __name__ == "__main__":
    main()
