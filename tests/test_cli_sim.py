"""``crawlpace sim``: a real process serving a farm, stopped by a signal, reporting what it saw."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from crawlpace.cli import main


def test_sim_serves_until_sigterm_then_reports(tmp_path: Path) -> None:
    output, urls = tmp_path / "figures.json", tmp_path / "urls.txt"
    process = subprocess.Popen(
        [sys.executable, "-m", "crawlpace", "sim", "mixed", "--output", str(output), "--urls", str(urls),
         "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert process.stdout is not None
        banner = []
        for line in process.stdout:
            banner.append(line)
            if line.startswith("serving"):
                break
        text = "".join(banner)
        assert "crawlpace sim: 11 sites of farm 'mixed'" in text
        assert "slowshop      ratelimit   http://127.0.0.2:" in text
        pages = urls.read_text(encoding="utf-8").split()
        slowshop = [url for url in pages if url.startswith("http://127.0.0.2:")]
        assert len(slowshop) == 20
        with httpx.Client(trust_env=False, timeout=5.0) as client:
            codes = [client.get(url).status_code for url in slowshop[:5]]
            live = client.get(text.split("live figures: ")[1].split()[0]).json()
        assert codes[:2] == [200, 200]  # a burst of two, then the bucket is empty
        assert live["slowshop"]["requests"] == 5
        process.send_signal(signal.SIGTERM)
        rest, errors = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 0, errors
    figures = json.loads(rest.strip().splitlines()[-1])
    site = figures["sites"]["slowshop"]
    assert site["requests"] == 5
    assert site["ok"] == codes.count(200)
    assert site["throttled"] == codes.count(429)
    assert figures["totals"]["requests"] == 5
    assert "slowshop     ratelimit          5" in rest
    saved = json.loads(output.read_text(encoding="utf-8"))
    assert saved["sites"]["slowshop"]["timeline"]["requests"] == [5]
    assert saved["sites"]["deadlink"]["requests"] == 0


def test_sim_stops_by_itself_and_draws_a_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    farm = tmp_path / "one.toml"
    farm.write_text('[[site]]\nname = "solo"\nprofile = "ratelimit"\nrate = 5.0\n', encoding="utf-8")
    plot = tmp_path / "rate.png"
    assert main(["sim", str(farm), "--duration", "0.2", "--output", "", "--plot", str(plot), "--json"]) == 0
    out = capsys.readouterr().out
    figures = json.loads(out.strip().splitlines()[-1])
    assert list(figures["sites"]) == ["solo"]
    assert figures["sites"]["solo"]["capacity"] == 5.0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "crawlpace-sim.json").exists()


def test_sim_lists_the_shipped_farms(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--list"]) == 0
    out = capsys.readouterr().out
    assert "mixed: slowshop (ratelimit), politeblog (crawldelay)" in out
    assert out.count("\n") >= 5


def test_sim_explains_a_bad_farm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    farm = tmp_path / "bad.toml"
    farm.write_text('[[site]]\nname = "x"\nprofile = "headers"\nlimit = 0\n', encoding="utf-8")
    assert main(["sim", str(farm)]) == 3
    err = capsys.readouterr().err
    assert "invalid farm" in err
    assert "bad.toml: site 'x': limit = 0 is too small; set limit to an integer >= 1" in err
    assert main(["sim", "nowhere"]) == 3
    assert "no farm file 'nowhere' and no shipped farm of that name" in capsys.readouterr().err


def test_a_missing_matplotlib_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    from crawlpace.sim._plot import PlotUnavailable, write_plot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotUnavailable, match=r"pip install 'crawlpace\[plot\]'"):
        write_plot({}, "never.png")


def test_sim_refuses_bad_ports_and_durations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "mixed", "--port", "70000", "--output", ""]) == 3
    assert "cannot serve the farm: port must be an integer from 0 to 65535" in capsys.readouterr().err
    assert main(["sim", "mixed", "--duration", "0", "--output", ""]) == 3
    assert "--duration 0 must be a positive number of seconds" in capsys.readouterr().err


def test_sim_uses_the_control_port_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert main(["sim", "mixed", "--control-port", str(port), "--duration", "0.1", "--output", ""]) == 0
    assert f"live figures: http://127.0.0.1:{port}/stats" in capsys.readouterr().out


def test_a_reader_that_goes_away_ends_the_command_without_a_traceback() -> None:
    """``crawlpace sim random ... | head``: the reader closes the pipe, the command stops quietly."""
    command = [sys.executable, "-m", "crawlpace", "sim", "random", "--seed", "1", "--sites", "3000",
               "--draw-only"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None
        assert child.stderr is not None
        assert child.stdout.read(10)  # far less than the farm it draws
        child.stdout.close()
        errors = child.stderr.read().decode()
        assert child.wait(timeout=60) == 1, errors
    assert "Traceback" not in errors
