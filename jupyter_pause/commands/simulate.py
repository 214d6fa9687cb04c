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
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=("table", "json", "csv"), default="table")
    out.add_argument("--html", metavar="PATH", help="write a page with the table and the plot")
    out.add_argument("--svg", metavar="PATH", help="write the plot as SVG")


def run(args: argparse.Namespace) -> int:
    import json

    from ..report.build import parse_time
    from ..simulator import traces
    from ..simulator.simulate import Costs, parse_distribution, parse_thresholds, simulate

    if args.trace:
        trace = traces.read_csv(args.trace)
    elif args.ledger:
        from ..ledger import Ledger

        trace = traces.from_ledger(
            Ledger(args.ledger), parse_time(args.since), parse_time(args.until)
        )
        if not trace.sessions:
            print("the ledger has no cell activity in that period", file=sys.stderr)
            return 1
    else:
        trace = traces.synthetic(users=args.users, days=args.days, seed=args.seed, crowd=args.crowd)
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
