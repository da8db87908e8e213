"""The ``hetlab`` console script: ``doctor``, ``head``, ``join``, ``pair``, ``wslconfig`` (notebook 04), ``train`` (07),
``search`` (09), ``report`` (the learner's hand-in, 09), ``update`` (a new version, your work kept) and
``gpu-check`` (an NVIDIA card).

A subcommand is ``_add_<name>(subparsers)`` plus ``_<name>(args) -> int``, listed in ``SUBCOMMANDS``
(a larger one in ``hetlab.tools.cli.<name>``); ``main`` turns a HetlabError into one line and exit status 2.
"""
from __future__ import annotations

import argparse
import sys

from hetlab.errors import HetlabError
from hetlab.tools.cli.gpu_check import add_gpu_check
from hetlab.tools.cli.report import add_report
from hetlab.tools.cli.search import add_search
from hetlab.tools.cli.train import add_train
from hetlab.tools.cli.update import add_update
from hetlab.vocab import Ports


def print_steps(text: str) -> None:
    """Printed steps (``head``, ``join``, ``pair``): the notes and marker lines go to stderr, each block's
    lines to stdout. A terminal shows them in order; stdout alone (``hetlab join ... | pbcopy`` on the
    Mac) is exactly what to paste, with no note that zsh would try to run."""
    from hetlab.cluster.commands import BEGIN, END
    begin, inside = BEGIN.split("{")[0], False
    for line in text.splitlines():
        marker = line.startswith(begin) or line == END
        inside = line.startswith(begin) or (inside and line != END)
        print(line, file=sys.stdout if inside and not marker else sys.stderr, flush=True)


def _add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="check this machine (and the head) before joining a cluster")
    p.add_argument("--head", metavar="ADDRESS", help="head's IP:PORT, e.g. 192.168.1.10:6379")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the head")
    p.set_defaults(run=_doctor)


def _doctor(args) -> int:
    from hetlab.tools.doctor import preflight
    checks = preflight.doctor(head=args.head, timeout=args.timeout)
    print(preflight.render(checks))
    return 0 if all(c.ok for c in checks) else 1


def _ports_args(p) -> None:
    p.add_argument("--port", type=int, default=None, help=f"head's GCS port (default {Ports.gcs}, or the saved pair's)")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs this node offers Ray")
    p.add_argument("--num-gpus", type=int, default=None, help="GPUs this node offers Ray")
    p.add_argument("--start", action="store_true", help="day two (after a reboot): run this machine's "
                   "printed `ray start` line instead of printing the steps (the token must be in place); "
                   "with no addresses given, the pair notebook 04 saved")


def _add_head(sub) -> None:
    p = sub.add_parser("head", help="print (or --start: run) the commands that start the head (the desktop: "
                       "Linux, or WSL2; or a Mac that the desktop joins)")
    p.add_argument("--ip", default=None, help="this machine's LAN IP (Linux: hostname -I; macOS: ipconfig "
                   "getifaddr en0; WSL in mirrored mode shares Windows' address); default: the pair notebook 04 saved")
    p.add_argument("--role", default=None, help="hetlab role of this node (default desktop; mac on a Mac)")
    p.add_argument("--windows", action="store_true", help="a Windows desktop running the course in "
                   "WSL2: print the PowerShell steps too (the default inside WSL)")
    p.add_argument("--mac-ip", default=None, help="the Mac's LAN IP, the only address the firewall rules "
                   "admit (default: the pair notebook 04 saved, else the placeholder MAC_IP)")
    _ports_args(p)
    p.set_defaults(run=_head)


def _head(args) -> int:
    from hetlab.cluster import commands
    from hetlab.cluster.connecting import requested_address
    from hetlab.windows import steps, wsl
    saved = requested_address().pair
    mac = sys.platform == "darwin" and not args.windows     # a Mac's head: the desktop joins it
    ip = args.ip or _saved(saved, *HEAD_IP["mac" if mac else "desktop"])
    mac_ip = args.mac_ip or (saved.mac_ip if saved else None)
    ports = commands.Ports(gcs=args.port if args.port is not None else (saved.port if saved else Ports.gcs))
    options = dict(role=args.role or ("mac" if mac else "desktop"), cpus=args.num_cpus, gpus=args.num_gpus)
    inside_wsl = wsl.in_wsl()
    on_windows = steps.flavour(sys.platform, inside_wsl, args.windows) == "windows"  # native Windows: refused
    if args.start:
        _not_moved(saved, options["role"], args.ip)
        return commands.start(*commands.head_start(ip, ports, mac=mac, **options))
    if on_windows:
        print_steps(steps.render_head(ip, mac_ip, ports, _windows_build(inside_wsl), **options))
    else:
        print_steps(commands.render_head(ip, ports, mac=mac, mac_ip=mac_ip, **options))
    return 0


# `hetlab head` with no --ip and no saved pair: this machine's field of the pair, and how to find its
# address with its own system's commands (BSD hostname has no -I)
HEAD_IP = {"desktop": ("desktop_ip", "--ip DESKTOP_IP (this desktop's LAN address: hostname -I)"),
           "mac": ("mac_ip", "--ip MAC_IP (this Mac's LAN address: ipconfig getifaddr en0 for Wi-Fi, or System "
                             "Settings > Network > your connection > Details)")}


def _saved(saved, field: str, flag: str) -> str:
    """A value of the saved pair, or one line saying which flag to give (no pair saved here)."""
    if saved is None:
        raise HetlabError(f"no pair saved here yet (notebook 04 saves it once the Mac has joined): give {flag}.")
    return getattr(saved, field)


def _not_moved(saved, role: str, ip: str | None) -> None:
    """Day two: one line, before Ray starts, when this machine no longer holds the saved pair's address."""
    from hetlab.cluster import joining
    problem = None if ip else joining.check(saved, role)
    if problem:
        raise HetlabError(problem)


def _add_pair(sub) -> None:
    p = sub.add_parser("pair", help="show the pair notebook 04 saved; day two, when a machine's address "
                       "changed: save the new one (and, on the desktop, print the firewall lines for it)")
    p.add_argument("--mac-ip", default=None, help="the Mac's new LAN address")
    p.add_argument("--desktop-ip", default=None, help="the desktop's new LAN address")
    p.set_defaults(run=_pair)


def _pair(args) -> int:
    from hetlab.cluster import joining
    from hetlab.cluster.connecting import requested_address
    from hetlab.windows import wsl
    saved = requested_address().pair
    if not (args.mac_ip or args.desktop_ip):
        print(saved or "no pair saved here yet: notebook 04 saves it once the Mac has joined")
        return 0
    from hetlab.cluster.commands import block as pasteable, stop_at_failure
    notes, block = joining.update(saved, args.desktop_ip, args.mac_ip, windows=wsl.in_wsl())
    print_steps(pasteable(notes, "the desktop's terminal", stop_at_failure(block)) if block else "\n".join(notes))
    return 0


def _windows_build(inside_wsl: bool) -> int | None:
    """Windows' build, read through WSL's interop (None outside WSL: the steps then say how to check)."""
    from hetlab.windows import wsl
    return wsl.windows_build(wsl.output(["cmd.exe", "/c", "ver"])) if inside_wsl else None


def _add_join(sub) -> None:
    p = sub.add_parser("join", help="print (or --start: run) the commands that join a machine (the Mac) to "
                       "the head")
    p.add_argument("--head", default=None, help="the head's LAN IP; default: the pair notebook 04 saved")
    p.add_argument("--ip", default=None, help="this machine's LAN IP (macOS: System Settings > Network, or "
                   "ipconfig getifaddr en0 for Wi-Fi); default: the pair notebook 04 saved")
    p.add_argument("--head-user", default=None, help="your user name on the head, for the SSH line that "
                   "fetches the token (default: the placeholder DESKTOP_USER)")
    p.add_argument("--role", default=None, help="hetlab role of this node (default mac; desktop with --windows)")
    p.add_argument("--linux", action="store_true", help="the joining machine is not a Mac")
    p.add_argument("--head-wsl", action="store_true", help="the head runs inside WSL on a Windows desktop: "
                   "no SSH route to it, so the token is typed (hidden) from what the head showed")
    p.add_argument("--windows", action="store_true", help="a Windows desktop (WSL2) joining a Mac's head: "
                   "print the PowerShell steps too (the default inside WSL)")
    _ports_args(p)
    p.set_defaults(run=_join)


def _join(args) -> int:
    from hetlab.cluster import commands
    from hetlab.cluster.connecting import requested_address
    from hetlab.windows import steps, wsl
    saved = requested_address().pair
    head = args.head or _saved(saved, "desktop_ip", "--head DESKTOP_IP (the desktop's LAN address)")
    ip = args.ip or (saved.mac_ip if saved else None)
    ports = commands.Ports(gcs=args.port if args.port is not None else (saved.port if saved else Ports.gcs))
    inside_wsl = wsl.in_wsl()
    on_windows = not args.linux and steps.flavour(sys.platform, inside_wsl, args.windows, "join") == "windows"
    options = dict(role=args.role or ("desktop" if on_windows else "mac"), cpus=args.num_cpus, gpus=args.num_gpus)
    if args.start:
        _not_moved(saved, options["role"], args.ip)
        return commands.start(*commands.join_start(head, ip, ports, mac=not (args.linux or on_windows),
                                                   **options))
    if on_windows:
        print_steps(steps.render_join(head, ip, ports, _windows_build(inside_wsl), **options))
    else:
        print_steps(commands.render_join(head, ip, ports, mac=not args.linux, head_user=args.head_user,
                                         token="by hand" if args.head_wsl else "ssh", **options))
    return 0


def _add_wslconfig(sub) -> None:
    p = sub.add_parser("wslconfig", help="inside WSL: put the course's settings into Windows' .wslconfig "
                       "(backed up first; your other settings stay), or --undo")
    p.add_argument("--undo", action="store_true", help="put back the .wslconfig hetlab found, and print "
                   "the Windows teardown")
    p.add_argument("--file", default=None, help="the .wslconfig to edit (default: Windows' "
                   "%%UserProfile%%\\.wslconfig, found from inside WSL)")
    p.set_defaults(run=_wslconfig)


def _wslconfig(args) -> int:
    from pathlib import Path

    from hetlab.windows import steps, wsl
    path = Path(args.file) if args.file else wsl.wslconfig_path()
    if path is None:
        raise HetlabError("no Windows profile found from here: run `hetlab wslconfig` inside WSL (Ubuntu) "
                          "on the Windows desktop, or give --file PATH.")
    if args.undo:
        print(f"# {wsl.undo(path)}")
        record = path.with_name(steps.POWER_RECORD)
        before = steps.power_before(record.read_text(errors="replace") if record.exists() else None)
        print(steps.undo_text(before))
        return 0
    build = _windows_build(wsl.in_wsl())
    if wsl.build_problem(build):
        raise HetlabError(wsl.build_problem(build).split(". ", 1)[0] + ": hetlab wslconfig changes nothing.")
    if build is None:
        print("# could not read Windows' build (cmd.exe /c ver): winver on Windows must show build 22621 or "
              "newer, or mirrored networking stays off whatever .wslconfig says")
    changed = wsl.write(path)
    print(f"{path}: " + (f"set {', '.join(changed)} (the file as it was: {path.name}{wsl.BACKUP_SUFFIX}); "
                         f"`wsl --shutdown` in PowerShell applies it" if changed
                         else "already has the course's settings; nothing changed"))
    return 0


SUBCOMMANDS = [_add_doctor, _add_head, _add_join, _add_pair, _add_wslconfig, add_train, add_search, add_gpu_check,
               add_report, add_update]


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
