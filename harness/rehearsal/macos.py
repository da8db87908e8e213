"""A macOS command set for the rehearsal's "mac" host shell (every paste on the mac role: ``learner``).

The "mac" host is Linux: pasted among Linux's programs, a Mac's block that leans on one a stock Mac
lacks would still pass. So a paste on the mac role finds, in place of the system folders on its PATH,
one folder (``build``) holding:

- every program of this Linux's system folders except those a stock macOS lacks (``ABSENT``: ``ip``,
  ``ss``, ``timeout``, ``nproc`` and a few more; a list of the usual ones, not every Linux program):
  the shell itself then says "command not found", as zsh does on a Mac;
- wrappers that refuse GNU-only forms as macOS's BSD programs do, with their error text and exit 1:
  ``hostname -I`` (BSD's hostname takes -f, -s, -d only); ``stat -c``/``--format`` (BSD's stat formats
  with ``-f``, read here for ``%Lp %z %N %Su %Sg %m``); ``sed -i SCRIPT FILE``, GNU's no-suffix form
  (BSD's ``-i`` takes the next word as the backup suffix, then reads FILE as the script: for file.txt
  "invalid command code f", the message given here for any FILE). Their other uses run this Linux's
  program;
- labelled recording stand-ins for macOS-only programs (``pmset``, ``caffeinate``, ``ipconfig``,
  ``networksetup``, ``sw_vers``): each writes "name args" to ``~/macos-standins.log`` and says on
  stderr that it is a stand-in. ``ipconfig getifaddr IF`` prints this host's first IPv4 address (any
  IF); ``caffeinate CMD`` runs CMD, and without one returns at once (a Mac's holds until Ctrl-C).
  ``socketfilterfw`` is reached on a Mac by its full path, through sudo: the rehearsal's sudo
  stand-in records those calls (``learner.SUDO``).

Not modelled: BSD's other options (``date -d``, ``grep -P``, ``xargs -r``, ``stat -l/-r/-s/-x``,
``sed``'s ``a\\`` text), macOS's bash 3.2 and its /bin/sh, case-insensitive file names, ``/Users``
homes, ``open`` and ``pbcopy``, Homebrew's folders, and what the firewall and the privacy prompts do.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

SYSTEM = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
ABSENT = frozenset({"ip", "ss", "timeout", "nproc", "free", "lscpu", "lsb_release", "systemctl", "journalctl",
                    "apt", "apt-get", "dpkg", "ufw", "iptables", "nft", "wget", "tac"})
MARK = ".hetlab-macos"          # in the folder: a PATH that holds it is already macOS-like
LOG = "macos-standins.log"

HOSTNAME = """
for arg in ARGS:
    if arg.startswith("-"):
        bad = "-" if arg.startswith("--") else next((c for c in arg[1:] if c not in "fsd"), None)
        if bad:
            sys.exit(f"hostname: illegal option -- {bad}\\nusage: hostname [-f] [-s | -d] [name-of-host]")
run(ARGS)
"""
STAT = """
USAGE = "usage: stat [-FLnq] [-f format | -l | -r | -s | -x] [-t timefmt] [file|handle ...]"
CODES = {"%Lp": "%a", "%Su": "%U", "%Sg": "%G", "%z": "%s", "%N": "%n", "%m": "%Y"}
if ARGS[:1] == ["-f"] and len(ARGS) > 1:
    fmt = ARGS[1]
    for bsd, gnu in CODES.items():
        fmt = fmt.replace(bsd, gnu)
    run(["-c", fmt, *ARGS[2:]])
for arg in ARGS:
    if arg.startswith("-") and arg != "-":
        bad = "-" if arg.startswith("--") else next((c for c in arg[1:] if c not in "FLnqlrsxt"), None)
        if bad:
            sys.exit(f"stat: illegal option -- {bad}\\n{USAGE}")
run(ARGS)
"""
SED = """
out, i = [], 0
while i < len(ARGS):
    if ARGS[i] == "-i":
        if i + 1 == len(ARGS):
            sys.exit("sed: option requires an argument -- i\\nusage: sed script [-Ealnru] [-i extension] [file ...]")
        suffix = ARGS[i + 1]
        if "/" in suffix:
            script = next((a for a in ARGS[i + 2:] if not a.startswith("-")), "")
            sys.exit(f'sed: 1: "{script}": invalid command code {script[:1]}')
        out.append("-i" + suffix)
        i += 2
        continue
    out.append(ARGS[i])
    i += 1
run(out)
"""
WRAPPERS = {"hostname": HOSTNAME, "stat": STAT, "sed": SED}
STANDINS = ("pmset", "caffeinate", "ipconfig", "networksetup", "sw_vers")


def _wrapper(name: str, real: str, body: str) -> str:
    return (f"#!{sys.executable} -S\n"
            f'"""rehearsal wrapper: macOS\'s (BSD) {name} where it differs from GNU\'s (harness.rehearsal.macos)."""\n'
            f"import os, sys\nREAL = {real!r}\nARGS = sys.argv[1:]\n\n\n"
            f"def run(args):\n    os.execv(REAL, [REAL, *args])\n{body}")


def _standin(name: str, real_hostname: str | None) -> str:
    act = {"ipconfig": f'[ "$1" = getifaddr ] && {real_hostname or "false"} -I | cut -d" " -f1\n',
           "caffeinate": 'while [ $# -gt 0 ]; do case "$1" in -w|-t) shift 2;; -*) shift;; *) exec "$@";; esac; done\n'}
    return (f"#!/bin/sh\n# rehearsal stand-in for macOS's {name} (this host is Linux): records its call\n"
            f'echo "{name}${{*:+ $*}}" >> "$HOME/{LOG}"\n'
            f"echo \"{name}: rehearsal stand-in for macOS's {name} (recorded in ~/{LOG})\" >&2\n"
            + act.get(name, "") + "exit 0\n")


def build(folder: Path) -> Path:
    """Fill ``folder`` with the macOS command set (module docstring) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    real = {}
    for system in SYSTEM:
        if not os.path.isdir(system):
            continue
        for entry in sorted(os.scandir(system), key=lambda e: e.name):
            if entry.name not in real and os.access(entry.path, os.X_OK) and not entry.is_dir():
                real[entry.name] = entry.path
    for name, path in real.items():
        if name not in ABSENT and name not in WRAPPERS and not os.path.lexists(folder / name):
            (folder / name).symlink_to(path)
    scripts = {**{name: _wrapper(name, real[name], body) for name, body in WRAPPERS.items() if name in real},
               **{name: _standin(name, real.get("hostname")) for name in STANDINS}}
    for name, text in scripts.items():
        (folder / name).unlink(missing_ok=True)
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    (folder / MARK).write_text("the rehearsal's macOS command set: harness.rehearsal.macos\n")
    return folder


def on_path(path: str) -> bool:
    """Does ``path`` (a PATH value) already hold a macOS command set?"""
    return any(part and os.path.exists(os.path.join(part, MARK)) for part in path.split(os.pathsep))


def shell_path(path: str, folder: Path) -> str:
    """``path`` with its system folders replaced by ``folder`` (at the first one's place); the other
    folders (stand-ins, the course's environment) keep their order."""
    systems = {os.path.realpath(s) for s in SYSTEM}
    out = []
    for part in path.split(os.pathsep):
        if os.path.realpath(part) in systems:
            part = str(folder)
        if part and part not in out:
            out.append(part)
    return os.pathsep.join(out if str(folder) in out else [*out, str(folder)])
