"""The readiness board, with plain numbers: no clock, no event loop."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crawlpace._throttle._board import GLOBAL_CAP, Board, request_order


def test_a_key_is_popped_once_its_time_has_come() -> None:
    board: Board[str] = Board()
    board.due("a", 2.0)
    assert board.pop(1.0) is None
    assert board.next_at() == 2.0
    assert board.pop(2.0) == "a"
    assert board.pop(3.0) is None
    assert board.next_at() is None
    assert "a" not in board


def test_among_due_keys_the_lowest_rank_goes_first_then_the_earliest() -> None:
    board: Board[str] = Board()
    board.due("late-but-old", 3.0, rank=(1.0,))
    board.due("early-but-young", 1.0, rank=(5.0,))
    board.due("early-same-rank", 2.0, rank=(5.0,))
    assert [board.pop(10.0), board.pop(10.0), board.pop(10.0)] == \
        ["late-but-old", "early-but-young", "early-same-rank"]


def test_due_again_replaces_the_earlier_time_unless_asked_to_keep_it() -> None:
    board: Board[str] = Board()
    board.due("a", 5.0)
    board.due("a", 1.0)
    assert board.when("a") == 1.0
    board.due("a", 9.0, keep_earlier=True)
    assert board.when("a") == 1.0
    board.due("a", 9.0)
    assert board.pop(5.0) is None
    assert board.pop(9.0) == "a"


def test_a_parked_key_waits_for_a_release_of_its_scope() -> None:
    board: Board[str] = Board()
    board.park("q", ["example.com"])
    assert board.state("q") == "parked"
    assert board.next_at() is None
    assert board.released(["other.org"], now=1.0) == []
    assert board.pop(100.0) is None
    assert board.released(["example.com"], now=2.0) == ["q"]
    assert board.when("q") == 2.0
    assert board.pop(2.0) == "q"


def test_a_key_parked_on_two_scopes_wakes_once() -> None:
    board: Board[str] = Board()
    board.park("ab", ["a", "b"])
    assert board.released(["a"], now=1.0) == ["ab"]
    assert board.released(["b"], now=1.5) == []
    assert board.pop(2.0) == "ab"
    assert board.pop(2.0) is None


def test_keys_held_by_the_global_cap_wake_on_any_release_oldest_first() -> None:
    board: Board[str] = Board()
    board.park("young", [], rank=(7.0,))
    board.park("old", [], rank=(3.0,))
    board.park("own", ["x"], rank=(9.0,))
    assert board.parked_on("old") == (GLOBAL_CAP,)
    # The release of "x" wakes its own queue too, but the one waiting longest goes first.
    assert board.released(["x"], now=4.0) == ["old", "young", "own"]
    assert [board.pop(4.0), board.pop(4.0), board.pop(4.0)] == ["old", "young", "own"]


def test_a_parked_key_with_a_poll_time_is_looked_at_then() -> None:
    board: Board[str] = Board()
    board.park("shared", ["s"], poll_at=0.05)
    assert board.next_at() == 0.05
    assert board.pop(0.04) is None
    assert board.pop(0.05) == "shared"
    assert board.released(["s"], now=0.06) == []


def test_discard_takes_a_key_off_in_any_state() -> None:
    board: Board[str] = Board()
    board.due("d", 1.0)
    board.park("p", ["s"])
    board.discard("d")
    board.discard("p")
    board.discard("never-there")
    assert len(board) == 0
    assert board.released(["s"], now=2.0) == []
    assert board.pop(5.0) is None
    assert board.next_at() is None


def test_parking_a_due_key_takes_back_its_time() -> None:
    board: Board[str] = Board()
    board.due("k", 1.0)
    board.park("k", ["s"])
    assert board.pop(5.0) is None
    board.due("k", 6.0)
    assert board.released(["s"], now=6.5) == []
    assert board.pop(6.0) == "k"


def test_repr_counts_due_and_parked() -> None:
    board: Board[int] = Board()
    board.due(1, 2.0)
    board.park(2, ["s"])
    assert repr(board) == "<Board due=1 parked=1 next_at=2.0>"


def test_request_order_prefers_priority_then_quota_share_then_arrival() -> None:
    orders = [request_order(0, [0.1], seq=1), request_order(1, [], seq=2),
              request_order(0, [0.5, 0.2], seq=3), request_order(0, [0.1], seq=0)]
    assert sorted(orders) == [request_order(1, [], seq=2), request_order(0, [0.5, 0.2], seq=3),
                              request_order(0, [0.1], seq=0), request_order(0, [0.1], seq=1)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0, 10), st.floats(0, 10)), max_size=30),
       st.floats(0, 10))
def test_pop_hands_out_every_due_key_in_rank_order(items: list[tuple[int, float, float]],
                                                   now: float) -> None:
    board: Board[int] = Board()
    latest: dict[int, tuple[float, float]] = {}
    for key, when, rank in items:
        board.due(key, when, (rank,))
        latest[key] = (when, rank)
    popped: list[int] = []
    while (got := board.pop(now)) is not None:
        popped.append(got)
    expected = {key for key, (when, _rank) in latest.items() if when <= now}
    assert set(popped) == expected
    assert len(popped) == len(expected)
    ranks = [latest[key][1] for key in popped]
    assert ranks == sorted(ranks)
    rest = [when for key, (when, _rank) in latest.items() if when > now]
    assert board.next_at() == (min(rest) if rest else None)


def test_a_key_put_back_after_a_pop_keeps_only_its_new_time() -> None:
    board: Board[str] = Board()
    board.due("k", 1.0)
    board.due("k", 1.0)  # leaves a stale heap entry behind
    assert board.pop(1.0) == "k"
    board.due("k", 5.0)
    assert board.pop(2.0) is None  # the stale entries must not bring it back early
    assert board.next_at() == 5.0
    assert board.pop(5.0) == "k"
