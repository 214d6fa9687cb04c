"""``jupyter pause activity``: kernel activity for platforms that decide idleness.

With ``--json`` it prints what a Kubeflow Workspace ``podExec`` activity probe
expects (``{"has_activity": true}`` while any kernel is busy, else
``{"last_activity": "<ISO 8601>"}``) and also writes it to
``$OUTPUT_JSON_PATH`` when the probe sets that.  It asks the running Jupyter
server (found in the runtime directory, as ``jupyter server list`` does).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request

from ..idle_policy import probe_output


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--json", action="store_true", help="print the probe JSON only")
    parser.add_argument("--url", help="server URL (default: the running server)")
    parser.add_argument("--token", help="server token (default: the running server's)")


def _server(args) -> tuple[str, str]:
    if args.url:
        return args.url.rstrip("/") + "/", args.token or os.environ.get("JUPYTER_TOKEN", "")
    from jupyter_server.serverapp import list_running_servers

    servers = list(list_running_servers())
    if not servers:
        raise SystemExit("jupyter pause activity: no running Jupyter server found")
    server = servers[0]
    return server["url"], server.get("token", "")


def run(args) -> int:
    url, token = _server(args)
    request = urllib.request.Request(
        f"{url}jupyter-pause/api/activity",
        headers={"Authorization": f"token {token}"} if token else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            report = json.loads(response.read())
    except OSError as e:  # a failed probe never pauses: exit non-zero
        print(f"jupyter pause activity: cannot reach {url}: {e}", file=sys.stderr)
        return 1
    if args.json:
        output = probe_output(report["sessions"])
        text = json.dumps(output)
        if os.environ.get("OUTPUT_JSON_PATH"):
            with open(os.environ["OUTPUT_JSON_PATH"], "w") as f:
                f.write(text)
        print(text)
        return 0
    server = report["server"]
    print(f"server: {'idle' if server['idle'] else 'active'} ({server['reason']})")
    for s in report["sessions"]:
        verdict = "idle" if s["idle"] else "active"
        left = "" if s["seconds_left"] is None else f", acts in {s['seconds_left']:.0f} s"
        print(
            f"  {s['path']}: {verdict} for {s['idle_seconds']:.0f} s [{s['workload_class']}{left}]"
        )
        for reason in s["reasons"]:
            print(f"      {reason}")
    return 0
