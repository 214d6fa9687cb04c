"""The report and simulate sub-commands, driven through their argument parsers."""

from __future__ import annotations

import argparse
import csv
import importlib
import io
import json

from jupyter_pause.ledger import Ledger

from .test_accounting_report import DAY1, DAY2, alice_events, at


def run(name: str, argv: list[str], capsys) -> tuple[int, str]:
    module = importlib.import_module(f"jupyter_pause.commands.{name}")
    parser = argparse.ArgumentParser()
    module.add_arguments(parser, name)
    rc = module.run(parser.parse_args(argv))
    return rc, capsys.readouterr().out


def test_report_command(tmp_path, capsys):
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path, user="alice")
    for e in alice_events():
        ledger.record(e.type, path=e.path, workload_class=e.workload_class, time_=e.time, **e.data)
    ledger.close()
    period = ["--ledger", str(path), "--since", str(DAY1), "--until", str(at(DAY2, 12))]
    rc, out = run("report", period, capsys)
    assert rc == 0 and "Accelerator-hours" in out and "a.ipynb" in out
    rc, out = run("report", [*period, "--format", "json"], capsys)
    assert json.loads(out)["totals"]["gpu_hours"]["always_on"] == 27.0
    rc, out = run("report", [*period, "--format", "csv", "--csv-table", "pauses"], capsys)
    assert len(list(csv.DictReader(io.StringIO(out)))) == 2
    html = tmp_path / "r.html"
    rc, _ = run("report", [*period, "--format", "html", "-o", str(html)], capsys)
    assert 'data-chart="timeline"' in html.read_text()


def test_simulate_command(tmp_path, capsys):
    trace_csv, page, plot = tmp_path / "t.csv", tmp_path / "s.html", tmp_path / "s.svg"
    argv = [
        "--users",
        "3",
        "--days",
        "2",
        "--thresholds",
        "30m,never",
        "--write-trace",
        str(trace_csv),
    ]
    rc, out = run("simulate", [*argv, "--html", str(page), "--svg", str(plot)], capsys)
    assert rc == 0 and "30min" in out and "never" in out
    assert plot.read_text().startswith("<svg") and "<svg" in page.read_text()
    rc, out = run(
        "simulate",
        ["--trace", str(trace_csv), "--thresholds", "30m,never", "--format", "json"],
        capsys,
    )
    data = json.loads(out)
    assert [r["label"] for r in data["results"]] == ["30min", "never"]
    assert data["trace"]["sessions"] == 3
    rc, out = run("simulate", ["--trace", str(trace_csv), "--format", "csv", "--pool", "1"], capsys)
    assert out.splitlines()[0].startswith("label,threshold_s")
