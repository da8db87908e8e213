"""``python -m harness.rehearsal up|down|status|run|lab``, from the repository's root: the real pair
rehearsed on one Linux box, two network namespaces (``harness.rehearsal.run`` does the work). Its
arguments, and the dispatch of its actions: up, down, status, run (a command on a rehearsal host)
and lab (JupyterLab on the rehearsal desktop).
"""
from __future__ import annotations

import argparse
import sys

from hetlab.errors import HetlabError

USAGE = "python -m harness.rehearsal"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Two network namespaces play the desktop and the Mac: private addresses, a link\n"
                    "capped with tc (no latency emulated: this needs netem), and Ray started only by\n"
                    "pasting the lines `hetlab head`/`join` print into each host's shell: the desktop's\n"
                    "firewall is real ufw from those lines (Ray's GPU count is a labelled stand-in:\n"
                    "Ray reports a GPU on both real machines; torch here sees a CPU).\n"
                    "Needs root, ip, tc, nft, ufw and zsh. Run from the repository's root.",
        epilog="examples:\n"
               "  sudo .venv/bin/python -m harness.rehearsal up --link gigabit\n"
               "  sudo .venv/bin/python -m harness.rehearsal run -- hetlab train --steps 40\n"
               "  sudo .venv/bin/python -m harness.rehearsal lab      (JupyterLab on the rehearsal desktop)\n"
               "  sudo .venv/bin/python -m harness.rehearsal down")
    p.add_argument("action", choices=("up", "down", "status", "run", "lab"))
    p.add_argument("--link", default="wifi", metavar="wifi|gigabit", help="link cap (default wifi, 200 Mbit/s)")
    p.add_argument("--host", default="desktop", metavar="desktop|mac", help="run: which host (default desktop)")
    p.add_argument("--port", type=int, default=8888, help="lab: the port on this machine (default 8888)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="run: the command, after --")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _rehearse(args, parser)
    except HetlabError as exc:
        print(f"HetlabError: {exc}", file=sys.stderr)
        return 2


def _rehearse(args, parser) -> int:
    if args.command[:1] in (["-h"], ["--help"]):  # the command's place swallows them: help, not the action
        print(parser.format_help())
        return 0
    if args.command and args.action != "run":
        raise HetlabError(f"rehearse {args.action} takes no command ({' '.join(args.command)}): "
                          f"only `{USAGE} run -- COMMAND` runs one.")
    from harness import rehearsal
    if args.action == "up":
        print("building the rehearsal: two hosts, then the printed lines pasted on each (under a minute)")
        state = rehearsal.up(args.link)
        print(rehearsal.describe(state))
    elif args.action == "down":
        gone = rehearsal.down()
        print(f"rehearsal down: removed {', '.join(gone) if gone else 'nothing (none was up)'}")
    elif args.action == "status":
        state = rehearsal.status()
        print(rehearsal.describe(state) if state else f"no rehearsal is up (sudo {USAGE} up)")
        return 0 if state else 1
    elif args.action == "lab":
        return rehearsal.lab(args.port)
    else:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            raise HetlabError(f"rehearse run needs a command after --, e.g. {USAGE} run -- hetlab train")
        return rehearsal.run_on(args.host, command).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
