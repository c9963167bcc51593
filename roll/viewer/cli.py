"""``roll view`` and ``roll plot`` (wired in roll/cli.py)."""
from __future__ import annotations

import argparse
import sys

from roll.viewer.plots import write_plots
from roll.viewer.report import build_report


def cmd_view(args: argparse.Namespace) -> int:
    max_steps = getattr(args, "max_steps", 40) or None  # 0 on the command line: every dumped step
    if not args.serve:
        path = build_report(args.run_dir, args.out, max_trajectory_steps=max_steps)
        print(f"report: {path}")
        return 0
    from roll.viewer.server import make_server

    if args.out:
        print(f"report: {build_report(args.run_dir, args.out, max_trajectory_steps=max_steps)}")
    server = make_server(args.run_dir, port=args.port, max_trajectory_steps=max_steps)
    host, port = server.server_address[:2]
    print(f"serving the report of {args.run_dir} at http://{host}:{port}/ (rebuilt on each reload; Ctrl-C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    written = write_plots(args.run_dir)
    if not written:
        print(f"no metrics in {args.run_dir} yet: nothing to plot")
        return 0
    print(f"{len(written)} plots in {written[0].parent}")
    return 0
