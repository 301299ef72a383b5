"""Part 3 of ``bench/scale.py``: what one admission costs with K scopes held, each store.

Why it is built this way: the first version measured K = 1 k, then 10 k, then
100 k one after the other, five blocks each, in a store that kept every scope
it had admitted. On a machine shared with other work its ratio swung from 1.05
to 2.14 between runs with nothing changed: the load moved between the
measurement at 1 k and the one at 100 k, and a sweep of the memory store fell
inside a block at small K (every 4 096 admissions) but never at large K.

Now every K has a store of its own, built first, and the stores take turns:
round after round, each admits ``block`` scopes not seen before (in a shuffled
order of the stores, so none always follows another). A round's ratio compares
blocks measured a few milliseconds apart, so a change of load hits both; the
figure is the median of the rounds' ratios. After each block its new scopes are
removed outside the timing, so every store holds exactly its K scopes all along:

* ``memory``: the K scopes hold a request in flight (they can never be swept),
  the clock moves past the new scopes' delays and the breaker's window, and
  :meth:`MemoryStore.evict_idle` forgets them. That call is exactly the
  store's own periodic sweep, so it is timed too: the sweep runs once every
  ``max(4096, K)`` admissions over the ``K`` kept scopes and those admitted
  since, and its share per admission is added to the block's cost for the
  amortised figure.
* ``redis``: each K lives in a database of its own on one server
  (``/0`` .. ``/3``), filled with admission hashes as the scripts leave them;
  the cost is the server's time in scripts during the block (``INFO
  commandstats``: what would grow with K), the wall time beside it. The new
  scopes' keys are deleted after the block, and the database's size is checked.

The garbage collector stays on, as in any process: it is one heap for every
store of the run, so its young collections cost each store alike, and a full
collection (over every object of the process) lands in one block of one store
and is outvoted by the median. What the collector costs per admission with K
scopes in the process is measured apart, in :func:`gc_share`.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from crawlpace import Settings
from crawlpace.stores import Lease, MemoryStore, Outcome, Store
from crawlpace.stores.memory import _SWEEP_MIN
from crawlpace.stores.redis import RedisStore
from crawlpace.testing import MockClock

OK = Outcome(status=200, latency=0.05)
# Commands whose server time is a script's: their usec includes the commands the script ran.
SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")


def busy_settings() -> Settings:
    return Settings.from_scrapy({"DOWNLOAD_DELAY": 1.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                                 "RANDOMIZE_DOWNLOAD_DELAY": False, "CONCURRENT_REQUESTS_PER_DOMAIN": 2})


def summarise(costs: dict[int, list[float]], extra: dict[int, float] | None = None) -> dict[str, Any]:
    """Medians per K, and the largest K against the smallest: per round, then the median of those ratios.

    ``extra`` is a cost per admission (µs) added to every block of that K: the
    sweep's share, for the amortised figure.
    """
    sizes = sorted(costs)
    low, high = sizes[0], sizes[-1]
    add = extra or {}
    ratios = [(h + add.get(high, 0.0)) / (lo + add.get(low, 0.0))
              for h, lo in zip(costs[high], costs[low], strict=True)]
    ordered = sorted(ratios)
    return {"us": {str(k): round(statistics.median(v) + add.get(k, 0.0), 3) for k, v in costs.items()},
            "ratio": round(statistics.median(ratios), 3),
            "ratio_q1_q3": [round(ordered[len(ordered) // 4], 3), round(ordered[(3 * len(ordered)) // 4], 3)],
            "rounds": len(ratios)}


# -- memory ---------------------------------------------------------------------------------


def memory_store(size: int) -> tuple[MemoryStore, MockClock]:
    clock = MockClock()
    store = MemoryStore(busy_settings(), clock, random.Random(1))
    for i in range(size):  # in flight for good: never idle, never swept
        if not isinstance(store.acquire_nowait(((f"k{i}", 1.0),)), Lease):
            raise RuntimeError("a held scope was refused")
    return store, clock


def dispatch_memory(sizes: list[int], rounds: int, block: int) -> dict[str, Any]:
    """Interleaved blocks of new-scope admissions over one memory store per K."""
    stores = {size: memory_store(size) for size in sizes}
    gc.collect()
    costs: dict[int, list[float]] = {size: [] for size in sizes}
    sweeps: dict[int, list[float]] = {size: [] for size in sizes}
    order, shuffle = list(sizes), random.Random(7)
    for r in range(rounds):
        shuffle.shuffle(order)
        for size in order:
            store, clock = stores[size]
            names = [f"new-{r}-{i}" for i in range(block)]
            acquire, release = store.acquire_nowait, store.release_nowait
            began = time.perf_counter()
            for name in names:
                release(acquire(((name, 1.0),)), OK)  # type: ignore[arg-type]
            costs[size].append((time.perf_counter() - began) / block * 1e6)
            clock.advance(120.0)  # past the new scopes' delay and the breaker's 60 s window
            began = time.perf_counter()
            forgotten = store.evict_idle()
            # Per scope scanned (K kept + the block), in µs.
            sweeps[size].append((time.perf_counter() - began) / (size + block) * 1e6)
            if forgotten != block or len(store) != size:
                raise RuntimeError(f"K={size}: the sweep forgot {forgotten} of {block}, {len(store)} held")
    # The store's own sweep: every max(4096, K) admissions, over K kept scopes plus those admitted since.
    share = {}
    for size in sizes:
        period = max(_SWEEP_MIN, size)
        share[size] = statistics.median(sweeps[size]) * (size + period) / period
    out = summarise(costs)
    amortised = summarise(costs, share)
    out.update({"amortised_us": amortised["us"], "amortised_ratio": amortised["ratio"],
                "sweep_us_per_scope": {str(k): round(statistics.median(v), 4) for k, v in sweeps.items()}})
    stores.clear()
    gc.collect()
    return out


class CollectorTimes:
    """A ``gc.callbacks`` entry: the time spent in collections of each generation, and how many."""

    def __init__(self) -> None:
        self.spent = [0.0, 0.0, 0.0]
        self.runs = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.spent[info["generation"]] += time.perf_counter() - self._started
            self.runs[info["generation"]] += 1


def gc_share(sizes: list[int], admissions: int, block: int = 2_000) -> dict[str, dict[str, float]]:
    """The garbage collector's time per admission with a store of K scopes alone in the process.

    In the interleaved rounds every store shares one heap, so a collection
    cannot be charged to one K. Here each K runs alone (the others freed): its
    store admits ``admissions`` new scopes in blocks, forgetting each block's
    as the rounds do, and ``gc.callbacks`` times every collection. A full
    collection walks every object of the process, so it takes longer with more
    scopes held, and it also comes more rarely (once the objects promoted since
    the last one reach a quarter of those held): both are in the figure, and
    the time of one full collection is given beside it.
    """
    out: dict[str, dict[str, float]] = {}
    for size in sizes:
        store, clock = memory_store(size)
        gc.collect()
        began = time.perf_counter()
        gc.collect()
        full = time.perf_counter() - began
        timed = CollectorTimes()
        gc.callbacks.append(timed)
        try:
            for r in range(admissions // block):
                for i in range(block):
                    store.release_nowait(store.acquire_nowait(((f"gc-{r}-{i}", 1.0),)), OK)  # type: ignore[arg-type]
                clock.advance(120.0)
                store.evict_idle()
        finally:
            gc.callbacks.remove(timed)
        done = (admissions // block) * block
        out[str(size)] = {"us_per_admission": round(sum(timed.spent) / done * 1e6, 4),
                          "full_collections": timed.runs[2],
                          "young_collections": timed.runs[0] + timed.runs[1],
                          "one_full_collection_ms": round(full * 1e3, 1)}
        del store
        gc.collect()
    return out


# -- redis ----------------------------------------------------------------------------------


def fill_redis(client: redis.Redis, namespace: str, count: int) -> None:
    """``count`` admission hashes of idle scopes, as the acquire and release scripts leave them."""
    now = time.time()
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        key = f"cp:{namespace}:{{k{i}}}:a"
        pipe.hset(key, mapping={"next": repr(now + 0.25), "last": repr(now), "sends": 1, "resp": 1,
                                "lat": "0.05", "mlat": "0.05"})
        pipe.expire(key, 3600)
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()


def script_usec(client: redis.Redis) -> float:
    """Microseconds the server has spent in scripts so far."""
    stats = client.info("commandstats")
    return sum(float(stats.get(f"cmdstat_{name}", {}).get("usec", 0)) for name in SCRIPT_COMMANDS)


async def admit(store: Store, name: str) -> None:
    lease = await store.acquire(((name, 1.0),))
    if not isinstance(lease, Lease):
        raise RuntimeError(f"scope {name} refused: {lease}")
    await store.release(lease, OK)


async def dispatch_redis(url: str, sizes: list[int], rounds: int, block: int) -> dict[str, Any]:
    """Interleaved blocks of new-scope admissions, one database per K on one server."""
    if len(sizes) > 16:
        raise ValueError("one Redis database per K: at most 16 sizes")
    parts = urlsplit(url)
    at = [urlunsplit((parts.scheme, parts.netloc, f"/{db}", "", "")) for db in range(len(sizes))]
    namespace = "dispatch"
    # Freeing a million hashes outlasted redis-py's 5 s socket timeout on a loaded machine. Not in the
    # background (FLUSHDB ASYNC): the next part measures the server's memory.
    clients = {size: redis.Redis.from_url(at[db], socket_timeout=600) for db, size in enumerate(sizes)}
    stores: dict[int, RedisStore] = {}
    for db, size in enumerate(sizes):
        clients[size].flushdb()
        fill_redis(clients[size], namespace, size)
        store = RedisStore(f"{at[db]}?namespace={namespace}&time=local", busy_settings(), MockClock(),
                           random.Random(1))
        await admit(store, "warm.example")  # scripts loaded, connection open
        await store.flush()
        stores[size] = store
    held = {size: int(clients[size].dbsize()) for size in sizes}
    probe = clients[sizes[0]]
    server: dict[int, list[float]] = {size: [] for size in sizes}
    wall: dict[int, list[float]] = {size: [] for size in sizes}
    order, shuffle = list(sizes), random.Random(7)
    try:
        for r in range(rounds):
            shuffle.shuffle(order)
            for size in order:
                store = stores[size]
                names = [f"new-{r}-{i}" for i in range(block)]
                usec = script_usec(probe)
                began = time.perf_counter()
                for name in names:  # one at a time: the cost of one admission, not of a batch
                    await admit(store, name)
                await store.flush()  # the last release rides with no later call: send it now
                wall[size].append((time.perf_counter() - began) / block * 1e6)
                server[size].append((script_usec(probe) - usec) / block)
                client = clients[size]
                client.delete(*(f"cp:{namespace}:{{{name}}}:{suffix}" for name in names for suffix in "alrp"))
                if client.dbsize() != held[size]:
                    raise RuntimeError(f"K={size}: {client.dbsize()} keys after a block, {held[size]} before")
    finally:
        for store in stores.values():
            await store.aclose()
        for client in clients.values():
            client.flushdb()
            client.close()
    out = summarise(server)
    walls = summarise(wall)
    out.update({"wall_us": walls["us"], "wall_ratio": walls["ratio"]})
    return out
