"""``jupyter pause simulate``: which idle threshold is worth it?

Replays activity traces (synthetic by default, a CSV, or the ledger) under
each idle threshold with a GPU pool and snapshot/restore costs, and reports
released accelerator-hours, pauses, interruptions, user waiting and queueing.
The model and its assumptions: :mod:`jupyter_pause.simulator.simulate` and
``docs/accounting.md``.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser, name: str = "simulate") -> None:
    src = parser.add_argument_group("trace (default: the synthetic week)")
    src.add_argument("--trace", help="CSV: session,user,start,end[,gpus,workload_class,...]")
    src.add_argument("--ledger", help="use cell activity recorded in this ledger file")
    src.add_argument("--since", help="ledger period start (ISO, epoch, or 7d ago)")
    src.add_argument("--until", help="ledger period end")
    src.add_argument("--users", type=int, default=8, help="synthetic: users (default 8)")
    src.add_argument(
        "--days", type=int, default=7, help="synthetic: days from a Monday (default 7)"
    )
    src.add_argument("--crowd", type=float, default=0.5, help="synthetic: share arriving at 9:00")
    src.add_argument("--seed", type=int, default=0, help="seed for the trace and capacity waits")
    src.add_argument("--write-trace", metavar="CSV", help="also write the trace used as CSV")
    m = parser.add_argument_group("model")
    m.add_argument(
        "--thresholds",
        default="10m,30m,1h,2h,4h,never",
        help="idle thresholds (default %(default)s)",
    )
    m.add_argument(
        "--pool", type=int, default=None, help="accelerators in the pool (default unlimited)"
    )
    m.add_argument("--state-gb", type=float, default=8.0, help="GB a pause writes / a resume reads")
    m.add_argument("--write-gbps", type=float, default=0.5, help="snapshot write GB/s")
    m.add_argument("--read-gbps", type=float, default=0.5, help="restore read GB/s")
    m.add_argument("--pause-overhead", type=float, default=10.0, help="fixed seconds per pause")
    m.add_argument("--resume-overhead", type=float, default=20.0, help="fixed seconds per resume")
    m.add_argument(
        "--capacity-wait",
        default="0:0.8,60:0.15,300:0.05",
        help="capacity wait distribution, seconds:probability,... (default %(default)s)",
    )
    m.add_argument(
        "--wait-budget",
        type=float,
        default=5.0,
        help="minutes of waiting for an accelerator per active user-day (default 5)",
    )
    m.add_argument("--interruption-minutes", type=float, default=10.0)
    m.add_argument("--short-break-minutes", type=float, default=120.0)
    ahead = parser.add_argument_group("resuming ahead of the user (scheduled and predicted resume)")
    ahead.add_argument(
        "--resume-policy",
        default="none",
        help="compare resume policies: none, scheduled[@HH:MM], predicted[:CONFIDENCE],"
        " comma-separated (e.g. none,scheduled,predicted,predicted:0.5); default %(default)s",
    )
    ahead.add_argument(
        "--schedule-at", default="08:45", help="scheduled: the time users schedule (%(default)s)"
    )
    ahead.add_argument(
        "--min-confidence",
        type=float,
        default=0.7,
        help="predicted: the confidence a prediction needs (default %(default)s)",
    )
    ahead.add_argument(
        "--margin", default="5m", help="predicted: ready this long before the user (%(default)s)"
    )
    ahead.add_argument(
        "--unused-after",
        default="30m",
        help="predicted: paused again when unused this long after ready (%(default)s)",
    )
    ahead.add_argument(
        "--min-samples", type=int, default=3, help="predicted: past returns needed (default 3)"
    )
    ahead.add_argument(
        "--history-weeks",
        type=int,
        default=3,
        help="synthetic: weeks of earlier activity the predictor learns from (other random"
        " days, the same users and habits; default 3). With --ledger and --since it learns"
        " from the ledger's activity before --since",
    )
    ahead.add_argument(
        "--tz", default="UTC", help="the users' time zone for days and hours (default UTC)"
    )
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=("table", "json", "csv"), default="table")
    out.add_argument("--html", metavar="PATH", help="write a page with the table and the plot")
    out.add_argument("--svg", metavar="PATH", help="write the plot as SVG")


def run(args: argparse.Namespace) -> int:
    import json

    from ..formatting import parse_duration
    from ..report.build import parse_time
    from ..simulator import traces
    from ..simulator.simulate import (
        Costs,
        parse_clock,
        parse_distribution,
        parse_policies,
        parse_thresholds,
        simulate,
    )

    prior = None  # the predictor's history before the trace
    if args.trace:
        trace = traces.read_csv(args.trace)
    elif args.ledger:
        from ..ledger import Ledger

        ledger = Ledger(args.ledger)
        since = parse_time(args.since)
        trace = traces.from_ledger(ledger, since, parse_time(args.until))
        if since is not None:  # the predictor learns from the activity before the period
            prior = traces.from_ledger(ledger, None, since)
            prior = prior if prior.sessions else None
        if not trace.sessions:
            print("the ledger has no cell activity in that period", file=sys.stderr)
            return 1
    else:
        trace = traces.synthetic(users=args.users, days=args.days, seed=args.seed, crowd=args.crowd)
    try:
        from zoneinfo import ZoneInfo

        policies = parse_policies(
            args.resume_policy,
            schedule_at=parse_clock(args.schedule_at),
            min_confidence=args.min_confidence,
            margin_s=parse_duration(args.margin),
            unused_after_s=parse_duration(args.unused_after),
            min_samples=args.min_samples,
            tz=ZoneInfo(args.tz),
        )
    except (ValueError, KeyError) as e:  # ZoneInfoNotFoundError is a KeyError
        print(f"jupyter pause simulate: {e}", file=sys.stderr)
        return 2
    if not args.trace and not args.ledger and args.history_weeks > 0:
        weeks = args.history_weeks
        prior = traces.synthetic(
            users=args.users,
            days=7 * weeks,
            seed=args.seed + 1,
            crowd=args.crowd,
            start=trace.start - 7 * weeks * traces.DAY,
        )
    if args.write_trace:
        with open(args.write_trace, "w") as f:
            f.write(trace.to_csv())
    costs = Costs(
        state_gb=args.state_gb,
        write_gbps=args.write_gbps,
        read_gbps=args.read_gbps,
        pause_overhead_s=args.pause_overhead,
        resume_overhead_s=args.resume_overhead,
        capacity_wait=parse_distribution(args.capacity_wait),
    )
    sim = simulate(
        trace,
        parse_thresholds(args.thresholds),
        pool=args.pool,
        costs=costs,
        seed=args.seed,
        wait_budget_min=args.wait_budget,
        interruption_minutes=args.interruption_minutes,
        short_break_minutes=args.short_break_minutes,
        policies=policies,
        prior=prior,
    )
    if args.format == "json":
        print(json.dumps(sim.to_json(), indent=1))
    elif args.format == "csv":
        sys.stdout.write(sim.to_csv())
    else:
        sys.stdout.write(sim.to_text())
    for path, text in ((args.html, sim.to_html), (args.svg, sim.to_svg)):
        if path:
            with open(path, "w") as f:
                f.write(text())
            print(f"wrote {path}", file=sys.stderr)
    return 0
