"""Settings: the three input forms, defaults, and one clear error per bad input."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from crawlpace import BackoffConfig, ConfigError, Jitter, ScopeConfig, Settings, parse_jitter

SCOPE_KEYS = ("backoff, breaker, concurrency, delay, delay_per_slot, gradual_slots, ignore_robots_txt, "
              "jitter, manager, quota, rampup, rampup_max_concurrency, rampup_min_delay, window")
BACKOFF_KEYS = ("concurrency_factor, delay_factor, exceptions, http_codes, jitter, max_delay, "
                "min_delay, window")

BAD_SCRAPY_SETTINGS: list[tuple[dict[str, Any], str]] = [
    ({"THROTTLING_SCOPES": {"api.example": {"concurency": 2}}},
     'THROTTLING_SCOPES["api.example"]: unknown key "concurency"; did you mean "concurrency"? '
     f"Valid keys: {SCOPE_KEYS}"),
    ({"DOWNLOAD_DELAY": -1}, "DOWNLOAD_DELAY: -1 is negative; use 0 or more"),
    ({"DOWNLOAD_DELAY": math.nan},
     "DOWNLOAD_DELAY: NaN is not allowed; use a finite number such as 1.0"),
    ({"DOWNLOAD_DELAY": math.inf},
     "DOWNLOAD_DELAY: inf is infinite; use a finite number such as 1.0"),
    ({"DOWNLOAD_DELAY": "fast"},
     "DOWNLOAD_DELAY: expected a number of seconds, got 'fast' (str); use a number such as 1.0"),
    ({"DOWNLOAD_DELAY_PER_SLOT": None},
     "DOWNLOAD_DELAY_PER_SLOT: expected a number of seconds, got None (NoneType); "
     "use a number such as 1.0"),
    ({"CONCURRENT_REQUESTS_PER_DOMAIN": 0},
     "CONCURRENT_REQUESTS_PER_DOMAIN: 0 is too small; use a whole number of 1 or more"),
    ({"CONCURRENT_REQUESTS_PER_DOMAIN": True},
     "CONCURRENT_REQUESTS_PER_DOMAIN: expected a whole number, got True (bool); "
     "use a whole number such as 8"),
    ({"CONCURRENT_REQUESTS_PER_DOMAIN": 2.5},
     "CONCURRENT_REQUESTS_PER_DOMAIN: 2.5 is not a whole number; use a whole number such as 8"),
    ({"CONCURRENT_REQUESTS": "16"},
     "CONCURRENT_REQUESTS: expected a whole number, got '16' (str); use a whole number such as 8"),
    ({"RANDOMIZE_DOWNLOAD_DELAY": 1.5},
     "RANDOMIZE_DOWNLOAD_DELAY: 1.5 is out of range; use a factor from 0 to 1 (0.5 means +/-50 %)"),
    ({"RANDOMIZE_DOWNLOAD_DELAY": [0.3, -0.1]},
     "RANDOMIZE_DOWNLOAD_DELAY: [0.3, -0.1] has low > high; write [low, high] with low <= high, "
     "e.g. [-0.1, 0.3]"),
    ({"RANDOMIZE_DOWNLOAD_DELAY": "yes"},
     "RANDOMIZE_DOWNLOAD_DELAY: expected true, false, a factor such as 0.5 or a [low, high] pair, "
     "got 'yes' (str)"),
    ({"RANDOMIZE_DOWNLOAD_DELAY": [-2, 0.5]},
     "RANDOMIZE_DOWNLOAD_DELAY: [-2, 0.5] would make delays negative; keep low >= -1"),
    ({"THROTTLING_SCOPES": ["api.example"]},
     "THROTTLING_SCOPES: expected a table of settings (a dict), got ['api.example'] (list)"),
    ({"THROTTLING_SCOPES": {"api.example": 5}},
     'THROTTLING_SCOPES["api.example"]: expected a table of settings (a dict), got 5 (int)'),
    ({"THROTTLING_SCOPES": {"": {"delay": 1}}},
     "THROTTLING_SCOPES: scope names must be non-empty strings, got '' (str)"),
    ({"THROTTLING_SCOPES": {"api.example": {"backoff": {"http_codes": [429, 700]}}}},
     'THROTTLING_SCOPES["api.example"]["backoff"]["http_codes"]: 700 is not an HTTP status code; '
     "use whole numbers from 100 to 599"),
    ({"THROTTLING_SCOPES": {"api.example": {"backoff": {"delay_factr": 2}}}},
     'THROTTLING_SCOPES["api.example"]["backoff"]: unknown key "delay_factr"; '
     f'did you mean "delay_factor"? Valid keys: {BACKOFF_KEYS}'),
    ({"BACKOFF_MIN_DELAY": 10, "BACKOFF_MAX_DELAY": 5},
     "BACKOFF_MIN_DELAY: 10 is above BACKOFF_MAX_DELAY (5); make the minimum no larger than the "
     "maximum"),
    ({"BACKOFF_DELAY_FACTOR": 0.5},
     "BACKOFF_DELAY_FACTOR: 0.5 would shorten delays on backoff; use 1.0 or more"),
    ({"BACKOFF_CONCURRENCY_FACTOR": 1.5},
     "BACKOFF_CONCURRENCY_FACTOR: 1.5 is out of range; use a factor above 0 and at most 1, e.g. 0.5"),
    ({"BACKOFF_HTTP_CODES": "429"},
     "BACKOFF_HTTP_CODES: expected a list of HTTP status codes such as [429, 503], got '429' (str)"),
    ({"BACKOFF_EXCEPTIONS": [42]},
     "BACKOFF_EXCEPTIONS: 42 is neither an exception class nor an import path such as "
     "'builtins.TimeoutError'"),
    ({"THROTTLING_SCOPES": {"api.example": {"quota": 0}}},
     'THROTTLING_SCOPES["api.example"]["quota"]: 0 is zero; use more than 0'),
    ({"THROTTLING_SCOPES": {"api.example": {"rampup": "yes"}}},
     "THROTTLING_SCOPES[\"api.example\"][\"rampup\"]: expected true or false, got 'yes' (str)"),
    ({"THROTTLING_WINDOW": 0}, "THROTTLING_WINDOW: 0 is zero; use more than 0"),
    ({"RAMPUP_BACKOFF_TARGET": [3, 1]},
     "RAMPUP_BACKOFF_TARGET: [3, 1] has low > high; write [low, high] with low <= high"),
    ({"THROTTLING_DELAY": 1},
     'THROTTLING_DELAY: unknown crawlpace setting; did you mean "DOWNLOAD_DELAY" (every scope), or the key '
     '"delay" in THROTTLING_SCOPES for some? '
     "see docs/settings.md for the full list"),
    ({"THROTTLING_MANAGER": "nodots"},
     "THROTTLING_MANAGER: expected an import path such as 'myproject.throttling.Manager', "
     "got 'nodots' (str)"),
    ({"THROTTLING_SCOPE_DEFAULTS": {"delay": -3}},
     'THROTTLING_SCOPE_DEFAULTS["delay"]: -3 is negative; use 0 or more'),
    ({"AUTOTHROTTLE_TARGET_CONCURRENCY": 0},
     "AUTOTHROTTLE_TARGET_CONCURRENCY: 0 is zero; use more than 0"),
]


@pytest.mark.parametrize(("settings", "message"), BAD_SCRAPY_SETTINGS,
                         ids=[str(i) for i in range(len(BAD_SCRAPY_SETTINGS))])
def test_bad_setting_has_one_exact_message(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_scrapy(settings)
    assert info.value.problems == [message]
    assert str(info.value) == message


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_scrapy({"THROTTLING_SCOPES": {"a.example": {"concurrency": 0, "delay": -1}},
                              "DOWNLOAD_DELAY": "x"})
    assert info.value.problems == [
        "DOWNLOAD_DELAY: expected a number of seconds, got 'x' (str); use a number such as 1.0",
        'THROTTLING_SCOPES["a.example"]["concurrency"]: 0 is too small; '
        "use a whole number of 1 or more",
        'THROTTLING_SCOPES["a.example"]["delay"]: -1 is negative; use 0 or more',
    ]


def test_defaults_are_the_seeds() -> None:
    settings = Settings.from_scrapy({})
    scope = settings.scope_config("anything.example")
    assert (scope.concurrency, scope.delay, scope.delay_per_slot) == (1, 1.0, 1.0)
    assert scope.jitter == Jitter(-0.5, 0.5)
    assert settings.concurrent_requests == 16
    backoff = scope.backoff
    assert backoff.http_codes == {429, 502, 503, 504, 520, 521, 522, 523, 524}
    # BACKOFF_MIN_DELAY unset: 1 s for a refusal nothing was measured for, and no floor.
    assert (backoff.delay_factor, backoff.min_delay, backoff.first_delay) == (2.0, None, 1.0)
    assert (backoff.max_delay, backoff.window) == (300.0, 60.0)
    assert backoff.jitter == Jitter(-0.1, 0.1)
    assert backoff.concurrency_factor == 0.5
    assert settings.rampup_backoff_target == (1.0, 1.0)
    assert (settings.robotstxt_obey, settings.robotstxt_max_delay) == (True, 60.0)
    assert settings.delayed_requests_warn_threshold == 500
    assert settings.autothrottle.start_delay == 5.0
    assert settings.autothrottle.max_delay == 60.0
    assert settings.autothrottle.target_concurrency == 1.0


def test_scrapy_names_fill_defaults_and_scopes_inherit_them() -> None:
    settings = Settings.from_scrapy({
        "CONCURRENT_REQUESTS": 64,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
        "DOWNLOAD_DELAY": 0.25,
        "DOWNLOAD_DELAY_PER_SLOT": 0.5,
        "RANDOMIZE_DOWNLOAD_DELAY": [-0.1, 0.3],
        "BACKOFF_MAX_DELAY": 120,
        "THROTTLING_SCOPES": {
            "quotes.toscrape.com": {"concurrency": 16, "delay": 0.0},
            "api.example": {"backoff": {"http_codes": [429, 403]}},
        },
        "SOME_OTHER_SCRAPY_SETTING": object(),  # not ours: ignored
    })
    assert settings.concurrent_requests == 64
    quotes = settings.scope_config("quotes.toscrape.com")
    assert (quotes.concurrency, quotes.delay, quotes.delay_per_slot) == (16, 0.0, 0.5)
    assert quotes.jitter == Jitter(-0.1, 0.3)
    api = settings.scope_config("api.example")
    assert api.backoff.http_codes == {429, 403}
    assert api.backoff.max_delay == 120.0  # inherited from BACKOFF_MAX_DELAY
    assert settings.scope_config("other.example").concurrency == 4


def test_scope_defaults_refine_the_scrapy_globals() -> None:
    settings = Settings.from_scrapy({
        "DOWNLOAD_DELAY": 2.0,
        "BACKOFF_MAX_DELAY": 100,
        "THROTTLING_SCOPE_DEFAULTS": {"concurrency": 3, "backoff": {"min_delay": 5}},
    })
    d = settings.scope_defaults
    assert (d.concurrency, d.delay, d.backoff.min_delay, d.backoff.max_delay) == (3, 2.0, 5.0, 100.0)


@pytest.mark.parametrize(("value", "expected"), [
    (True, Jitter(-0.5, 0.5)),
    (False, Jitter(0.0, 0.0)),
    (0.2, Jitter(-0.2, 0.2)),
    (0, Jitter(0.0, 0.0)),
    ([-0.1, 0.3], Jitter(-0.1, 0.3)),
    ((0.0, 1.0), Jitter(0.0, 1.0)),
])
def test_jitter_forms(value: object, expected: Jitter) -> None:
    assert parse_jitter(value) == expected


def test_jitter_describes_itself() -> None:
    assert Jitter(-0.5, 0.5).describe() == "+/-50%"
    assert Jitter(-0.1, 0.3).describe() == "-10%..+30%"
    assert Jitter().describe() == "off"


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "crawlpace.toml"
    path.write_text(
        'concurrent_requests = 32\n'
        '[scope_defaults]\nconcurrency = 2\ndelay = 0.5\njitter = false\n'
        '[scope_defaults.backoff]\nmax_delay = 90.0\n'
        '[scopes."api.example"]\nconcurrency = 8\ndelay = 0.1\n'
        '[scopes."api.example".backoff]\nhttp_codes = [429]\n',
        encoding="utf-8",
    )
    settings = Settings.from_toml(path)
    assert settings.concurrent_requests == 32
    api = settings.scope_config("api.example")
    assert (api.concurrency, api.delay, api.jitter.enabled) == (8, 0.1, False)
    assert (api.backoff.http_codes, api.backoff.max_delay) == (frozenset({429}), 90.0)


def _toml_problems(path: Path, text: str) -> list[str]:
    """Write ``text`` to ``path`` and return the problems reading it raises."""
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        Settings.from_toml(path)
    return info.value.problems


def test_toml_errors_name_the_file_and_the_path(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    assert _toml_problems(path, '[scopes."a.example"]\ndelay = -2\nconcurency = 3\n') == [
        f'{path}: scopes."a.example": unknown key "concurency"; did you mean "concurrency"? '
        f"Valid keys: {SCOPE_KEYS}",
        f'{path}: scopes."a.example".delay: -2 is negative; use 0 or more',
    ]


def test_toml_unknown_top_level_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("concurent_requests = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match='unknown key "concurent_requests"; did you mean '
                                          '"concurrent_requests"'):
        Settings.from_toml(path)


def test_unreadable_and_broken_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the settings file"):
        Settings.from_toml(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("delay = = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Settings.from_toml(broken)


def test_objects_built_in_python_are_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"ScopeConfig\.concurrency: 0 is too small"):
        ScopeConfig(concurrency=0)
    with pytest.raises(ConfigError, match=r"BackoffConfig\.min_delay: 9 is above"):
        BackoffConfig(min_delay=9.0, max_delay=3.0)


def test_inactive_settings_are_listed() -> None:
    settings = Settings.from_scrapy({
        "AUTOTHROTTLE_ENABLED": True,
        "THROTTLING_SCOPES": {"api.example": {"quota": 100.0, "rampup": True}},
    })
    # AutoThrottle does not steer a scope that has rampup on.
    assert settings.inactive() == ["AUTOTHROTTLE_ENABLED for scope 'api.example', which has rampup on: "
                                   "rampup sets its delay instead"]
    assert Settings.from_scrapy({"THROTTLING_SCOPES": {"api.example": {"rampup": True}}}).inactive() == []


def test_typed_objects_take_the_setting_forms_and_are_checked() -> None:
    assert ScopeConfig(jitter=True).jitter == Jitter(-0.5, 0.5)  # type: ignore[arg-type]
    assert ScopeConfig(jitter=0.2).jitter == Jitter(-0.2, 0.2)  # type: ignore[arg-type]
    assert BackoffConfig(http_codes=[429]).http_codes == frozenset({429})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^Settings\.concurrent_requests: 0 is too small"):
        Settings(concurrent_requests=0)
    with pytest.raises(ConfigError, match=r'Settings\.scopes\["a"\]: expected a ScopeConfig'):
        Settings(scopes={"a": {"delay": 1}})  # type: ignore[dict-item]


def test_unknown_names_are_reported_with_the_other_problems() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_scrapy({"THROTTLING_SCOPE": {}, "DOWNLOAD_DELAY": -1})
    assert info.value.problems == [
        'THROTTLING_SCOPE: unknown crawlpace setting; did you mean "THROTTLING_SCOPES"? '
        "see docs/settings.md for the full list",
        "DOWNLOAD_DELAY: -1 is negative; use 0 or more",
    ]


def test_toml_relation_error_names_the_file_once(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    assert _toml_problems(path, "[scope_defaults.backoff]\nmin_delay = 10\nmax_delay = 5\n") == [
        f"{path}: scope_defaults.backoff.min_delay: 10 is above scope_defaults.backoff.max_delay "
        "(5); make the minimum no larger than the maximum",
    ]
