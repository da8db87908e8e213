"""The ``hetlab`` console script: ``doctor``, ``head``, ``join`` (notebook 04), ``train`` (notebook 07),
``search`` (notebook 09), ``rehearse`` (the real pair rehearsed on one Linux box) and ``gpu-check``
(the course's CUDA claims on a machine with an NVIDIA card).

Each subcommand is one ``_add_<name>(subparsers)`` that registers its arguments
and one ``_<name>(args) -> int`` that does the work; ``main`` turns a HetlabError
into its one line on stderr and exit status 2. The small ones are here; a larger one has its
own module ``cli_<name>.py`` (``cli_train``, ``cli_search``, ``cli_rehearse``, ``cli_gpu_check``). To add a
subcommand, write the pair (in its own module if it is more than a few lines; ``cli_base``
has the subparser with examples) and list the ``_add_`` function in ``SUBCOMMANDS``.
"""
from __future__ import annotations

import argparse
import sys

from hetlab.errors import HetlabError
from hetlab.tools.cli_gpu_check import _add_gpu_check
from hetlab.tools.cli_rehearse import _add_rehearse
from hetlab.tools.cli_search import _add_search
from hetlab.tools.cli_train import _add_train
from hetlab.vocab import Ports


def _add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="check this machine (and the head) before joining a cluster")
    p.add_argument("--head", metavar="ADDRESS", help="head's IP:PORT, e.g. 192.168.1.10:6379")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the head")
    p.set_defaults(run=_doctor)


def _doctor(args) -> int:
    from hetlab.tools import preflight
    checks = preflight.doctor(head=args.head, timeout=args.timeout)
    print(preflight.render(checks))
    return 0 if all(c.ok for c in checks) else 1


GCS_PORT = Ports.gcs  # from hetlab.vocab: building the parser loads no Ray (a bad argument, --help,
                      # or a command that needs no Ray answers at once)


def _ports_args(p) -> None:
    p.add_argument("--port", type=int, default=GCS_PORT, help=f"head's GCS port (default {GCS_PORT})")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs this node offers Ray")
    p.add_argument("--num-gpus", type=int, default=None, help="GPUs this node offers Ray")


def _add_head(sub) -> None:
    p = sub.add_parser("head", help="print the commands that start the head (the desktop: Linux, or WSL2)")
    p.add_argument("--ip", required=True, help="this machine's LAN IP (Linux: hostname -I; WSL in "
                                               "mirrored mode shares Windows' address)")
    p.add_argument("--role", default="desktop", help="hetlab role of this node (default desktop)")
    p.add_argument("--windows", action="store_true", help="a Windows desktop running the course in "
                   "WSL2: print the PowerShell steps too (the default inside WSL)")
    p.add_argument("--mac-ip", default=None, help="the Mac's LAN IP, the only address the Windows "
                   "firewall rules admit (default: the placeholder MAC_IP)")
    _ports_args(p)
    p.set_defaults(run=_head)


def _head(args) -> int:
    from hetlab import commands, windows
    ports = commands.Ports(gcs=args.port)
    options = dict(role=args.role, cpus=args.num_cpus, gpus=args.num_gpus)
    on_windows = windows.head_flavour(sys.platform, windows.in_wsl(), args.windows) == "windows"
    print(windows.render_head(args.ip, args.mac_ip, ports, windows.ephemeral_range(), **options)
          if on_windows else commands.render_head(args.ip, ports, **options))
    return 0


def _add_join(sub) -> None:
    p = sub.add_parser("join", help="print the commands that join a machine (the Mac) to the head")
    p.add_argument("--head", required=True, help="the head's LAN IP")
    p.add_argument("--ip", default=None, help="this machine's LAN IP (macOS: ipconfig getifaddr en0)")
    p.add_argument("--role", default="mac", help="hetlab role of this node (default mac)")
    p.add_argument("--linux", action="store_true", help="the joining machine is not a Mac")
    _ports_args(p)
    p.set_defaults(run=_join)


def _join(args) -> int:
    from hetlab import commands
    print(commands.render_join(args.head, args.ip, commands.Ports(gcs=args.port), mac=not args.linux,
                               role=args.role, cpus=args.num_cpus, gpus=args.num_gpus))
    return 0


SUBCOMMANDS = [_add_doctor, _add_head, _add_join, _add_train, _add_search, _add_rehearse, _add_gpu_check]


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="hetlab", description="Train one model across unlike machines.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hetlab`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except HetlabError as exc:
        print(f"HetlabError: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
