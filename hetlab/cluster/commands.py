"""The ``ray start`` commands for a secure two-machine cluster (notebook 04, ``hetlab head/join``), and
running them on day two (``hetlab head/join --start``, bounded in time, a failure in one line).

``render_head`` and ``render_join`` print notes to read, then one block to paste between two marker
lines (``blocks`` reads them back). Flags as in ``ray/scripts/scripts.py`` of Ray 2.60.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import subprocess
import tempfile
import time

from hetlab import cluster
from hetlab.cluster.connecting import (parse_address, port_open, secure_token_files, stop_children_since,
                                       token_files)
from hetlab.errors import HetlabError
from hetlab.vocab import RAY_AUTH_ENV, RAY_MAC_CLUSTER_ENV, TOKEN_PATH, Ports

AUTH_ENV = {RAY_AUTH_ENV: "token"}  # token authentication everywhere, one shared token


def firewall_ranges(ports: Ports, head: bool) -> list[str]:
    """The ports of ``Ports.listening`` folded into ranges, e.g. ``["6379-6385", "10001-10063"]``."""
    spans: list[list[int]] = []
    for port in ports.listening(head):
        if spans and spans[-1][1] == port - 1:
            spans[-1][1] = port
        else:
            spans.append([port, port])
    return [str(low) if low == high else f"{low}-{high}" for low, high in spans]


def train_ranges(ports: Ports, role: str) -> list[str]:
    """TCP ports Ray Train needs on ``role`` from the other machine (notebook 07): the rendezvous store
    on the desktop, where rank 0 runs; nothing on the Mac, whose rank only connects out."""
    return [str(ports.train_rendezvous)] if role == "desktop" else []


def check_ip(ip: str, what: str = "IP") -> str:
    """The IP as text if it is a literal IPv4/IPv6 address, else a one-line HetlabError."""
    try:
        return str(ipaddress.ip_address(str(ip).strip()))
    except ValueError:
        raise HetlabError(f"{what} {ip!r} is not an IP address: give a LAN IP such as 192.168.1.10 "
                          f"(find it with `ipconfig getifaddr en0` on macOS, `hostname -I` on "
                          f"Linux).") from None


def _common(ip: str, role: str, ports: Ports, cpus: int | None) -> list[str]:
    # every port pinned, so a firewall can open exactly these, for the other machine only
    args = [f"--node-ip-address={ip}",  # explicit: what the node advertises (a Mac's host-name lookup breaks)
            f"--node-manager-port={ports.node_manager}",
            f"--object-manager-port={ports.object_manager}",
            f"--runtime-env-agent-port={ports.runtime_env_agent}",
            f"--dashboard-agent-grpc-port={ports.dashboard_agent_grpc}",
            f"--dashboard-agent-listen-port={ports.dashboard_agent_http}",
            f"--metrics-export-port={ports.metrics_export}",
            f"--min-worker-port={ports.min_worker}",
            f"--max-worker-port={ports.max_worker}",
            f"--resources={json.dumps(cluster.node_resources(role), separators=(',', ':'))}",
            f"--labels={cluster.ROLE_LABEL}={role}"]  # the hetlab role: a resource and a label (hetlab.cluster.roles)
    if cpus is not None:   # only tests/test_commands.py: a real head and Mac node on this box, one CPU each
        args.append(f"--num-cpus={int(cpus)}")
    return args


def head_start(ip: str, ports: Ports = Ports(), cpus: int | None = None) -> tuple[list[str], dict]:
    """The desktop's ``ray start --head`` as (argv, environment), its dashboard on 127.0.0.1 only. The
    environment: token auth, and the two metrics ports that have no ``ray start`` flag."""
    ip = check_ip(ip, "head IP")
    argv = (["ray", "start", "--head", f"--port={ports.gcs}", f"--ray-client-server-port={ports.client_server}",
             "--dashboard-host=127.0.0.1", f"--dashboard-port={ports.dashboard}", "--disable-usage-stats"]
            + _common(ip, "desktop", ports, cpus))
    return argv, {**AUTH_ENV, "AUTOSCALER_METRIC_PORT": str(ports.autoscaler_metrics),
                  "DASHBOARD_METRIC_PORT": str(ports.dashboard_metrics)}


def join_start(head_ip: str, ip: str | None, ports: Ports = Ports(),
               cpus: int | None = None) -> tuple[list[str], dict]:
    """The Mac's ``ray start --address=HEAD:PORT`` as (argv, environment), with the Mac's opt-in to
    multi-node clusters; ``ip=None`` leaves the placeholder ``MAC_IP``."""
    head_ip = check_ip(head_ip, "head IP")
    mine = "MAC_IP" if ip is None else check_ip(ip, "this machine's IP")
    argv = (["ray", "start", f"--address={gcs_address(head_ip, ports.gcs)}"]
            + _common(mine, "mac", ports, cpus))
    return argv, {**AUTH_ENV, RAY_MAC_CLUSTER_ENV: "1"}   # a Mac joins only with it; on this line only


def gcs_address(ip: str, port: int) -> str:
    """``IP:PORT`` as Ray takes it: an IPv6 address in brackets (a line to copy quotes it: zsh globs it)."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def shell_line(argv: list[str], env: dict | None = None) -> str:
    """One copy-paste line: ``VAR=value … ray start …`` with shell quoting."""
    prefix = [f"{key}={shlex.quote(value)}" for key, value in (env or {}).items()]
    return " ".join(prefix + [shlex.join(argv)])


BEGIN = "----- paste from here, whole, into {where} -----"
END = "----- to here -----"
_BLOCK = re.compile(r"^----- paste from here, whole, into (.+?) -----\n(.*?)\n?^----- to here -----$", re.M | re.S)


def block(notes: list[str], where: str, lines: list[str]) -> str:
    """Notes to read, then the lines to paste between two marker lines. No ``#`` note in a block: zsh,
    the Mac's shell, reads ``#`` as a comment only with ``interactivecomments`` on."""
    assert not any(line.lstrip().startswith("#") or " # " in line for line in lines), lines
    return "\n".join([*notes, BEGIN.format(where=where), *lines, END])


STOPPED = ('{ echo "hetlab: line $line of this block failed (its error is above), so the lines after it did '
           'not run: fix that, then paste the whole block again." >&2; false; }')
STOP_NOTE = "Each line starts `line=N &&`: the block stops at the first line that fails, and names it."
_STEP = re.compile(r"^line=\d+ && (.*) (?:&&|\|\|)$")


def stop_at_failure(lines: list[str]) -> list[str]:
    """Shell lines that, pasted whole, stop at the first one that fails and say which: one AND-list
    (``line=N && COMMAND &&``), then a line that names ``$line``. (``set -e`` would close the learner's
    Terminal.) Plain POSIX: zsh and bash read it alike."""
    if len(lines) < 2:
        return list(lines)
    return [f"line={i} && {line} {'&&' if i < len(lines) else '||'}" for i, line in enumerate(lines, 1)] + [STOPPED]


def steps(code: str) -> list[str]:
    """The commands of a block's text, without ``stop_at_failure``'s line numbers and last line."""
    return [match.group(1) if (match := _STEP.match(line)) else line
            for line in code.splitlines() if line.strip() and line != STOPPED]


def blocks(text: str) -> list[tuple[str, str]]:
    """Each block of printed ``text`` as (where it is pasted, the exact text to paste)."""
    return [(where, code) for where, code in _BLOCK.findall(text)]


def pasted(text: str) -> list[str]:
    """The commands of every block in ``text``: what a learner pastes, without the notes (``steps``)."""
    return [line for _, code in blocks(text) for line in steps(code)]


def ufw_steps(ports: Ports = Ports(), mac_ip: str | None = None) -> tuple[list[str], list[str]]:
    """The Linux desktop's firewall as (notes, lines): SSH open, the rest closed, the head's ports and
    Ray Train's open to the Mac's address only. ``--force``: ``ufw enable`` asks no question."""
    mac = check_ip(mac_ip, "the Mac's IP") if mac_ip else "MAC_IP"
    closed = ", ".join(str(p) for p in ports.local_only(head=True))
    rule = f"sudo ufw allow proto tcp from {mac} to any port"   # ufw spells a range 6379:6385
    ray = [f"{rule} {rng.replace('-', ':')}" for rng in firewall_ranges(ports, head=True)]
    train = train_ranges(ports, "desktop")
    notes = [f"2) firewall (ufw): SSH stays open, Ray's ports open to the Mac ({mac}) only, the rest closed "
             f"({closed} too: dashboard and metrics, local use only). The last allow line is Ray Train's "
             f"(notebook 07): the rendezvous store ({train[0]}), through which its ranks also swap their "
             f"gradients. No ufw? `sudo apt install ufw` first; with another firewall, open the same "
             f"TCP ports to the Mac's address only."]
    return notes, ["sudo ufw allow 22/tcp", "sudo ufw default deny incoming", *ray,
                   *[f"{rule} {rng}" for rng in train], "sudo ufw --force enable"]


def render_head(ip: str, ports: Ports = Ports(), where: str = "On the desktop (Linux, the head)",
                firewall: tuple[list[str], list[str]] | None = None, mac_ip: str | None = None,
                token: str = "ssh", paste_into: str = "a terminal on the desktop") -> str:
    """The desktop's steps as notes, then one block to paste: token, firewall, ``ray start --head``.
    ``firewall`` (notes, lines) replaces the ufw step (``hetlab.windows.wsl``); ``token="by hand"``: no
    SSH into WSL, so the block ends by showing the token, to type on the Mac."""
    argv, env = head_start(ip, ports)
    fw_notes, fw_lines = ufw_steps(ports, mac_ip) if firewall is None else firewall
    by_hand = token != "ssh"
    notes = [f"{where}. Read these notes, then paste the block below whole into a terminal there (bash), "
             f"with the course's environment active:",
             "1) one token for the whole cluster, private to you.",
             *fw_notes,
             "3) start the head (dashboard on 127.0.0.1 only: open http://127.0.0.1:8265 here; from the Mac, "
             "ssh -L 8265:127.0.0.1:8265 USER@DESKTOP_IP, with openssh-server on the desktop).",
             ("4) the block's last line shows the token: the Mac's first line waits for you to type it there "
              "(nothing echoes). It never crosses the network." if by_hand else
              "4) the Mac fetches the token over SSH (its steps): nothing to do here."),
             "Stop: `ray stop` (stops every Ray process of this user on this machine).", STOP_NOTE]
    lines = ["ray get-auth-token --generate >/dev/null && chmod 600 " + TOKEN_PATH, *fw_lines,
             shell_line(argv, env), *(["ray get-auth-token"] if by_hand else [])]
    return block(notes, paste_into, stop_at_failure(lines))


MACOS_FIREWALL = "/usr/libexec/ApplicationFirewall/socketfilterfw"
# The programs that accept connections on a Mac node: the conda env's Python (workers and
# Ray's agents) and Ray's raylet (node and object manager); gcs_server only on a head.
MACOS_APPS = ("import ray, os, sys; d = os.path.join(os.path.dirname(ray.__file__), 'core', 'src', 'ray'); "
              "print(os.path.realpath(sys.executable)); print(os.path.join(d, 'raylet', 'raylet')); "
              "print(os.path.join(d, 'gcs', 'gcs_server'))")


# The Mac's firewall allows applications, not ports: these, one per line, then each allowed.
MACOS_FIREWALL_LINE = (f'apps=$(python -c "{MACOS_APPS}") && printf \'%s\\n\' "$apps" | while read -r app && '
                       f'[ -n "$app" ]; do sudo {MACOS_FIREWALL} --add "$app" && sudo {MACOS_FIREWALL} '
                       f'--unblockapp "$app"; done')


def render_join(head_ip: str, ip: str | None, ports: Ports = Ports(), head_user: str | None = None,
                token: str = "ssh") -> str:
    """The Mac's steps as notes, then one block to paste: token, firewall, ``ray start --address``.

    The token comes over the SSH the Mac already uses (``head_user``), into a variable first (a failed
    fetch leaves no empty file), written under ``umask 077``; ``token="by hand"`` (a head inside WSL):
    typed, unechoed (``read -rs``)."""
    argv, env = join_start(head_ip, ip, ports)
    head_ip = check_ip(head_ip, "head IP")
    ranges = " ".join(firewall_ranges(ports, head=False))
    by_hand = (f'mkdir -p ~/.ray && (umask 077 && read -rs TOKEN && [ -n "$TOKEN" ] && printf %s "$TOKEN" > '
               f'{TOKEN_PATH}) && chmod 600 {TOKEN_PATH}')
    if token != "ssh":
        tk_note, tk_line = (f"1) the desktop's token in {TOKEN_PATH}, private to you: the first line waits; type "
                            f"the token that `ray get-auth-token` showed on the desktop (nothing echoes), then "
                            f"Enter."), by_hand
    else:
        tk_note = (f"1) the desktop's token in {TOKEN_PATH}, private to you, read over the SSH you already use. "
                   f"No SSH to the desktop? Run `ray get-auth-token` there, and here, instead of the block's "
                   f"first line: `{by_hand}`, then type the token (nothing echoes).")
        tk_line = (f"mkdir -p ~/.ray && (umask 077 && TOKEN=$(ssh {head_user or 'DESKTOP_USER'}@{head_ip} "
                   f"'cat {TOKEN_PATH}') && [ -n \"$TOKEN\" ] && printf %s \"$TOKEN\" > {TOKEN_PATH}) && "
                   f"chmod 600 {TOKEN_PATH}")
    notes = ["On the Mac (joins the desktop's head). Read these notes, then paste the block below whole into "
             "Terminal there, with `conda activate hetlab` done in ~/hetlab:",
             tk_note,
             f"2) firewall: Ray connects in both directions (the desktop opens TCP {ranges} here). The macOS "
             f"firewall is per APPLICATION, not per port or address: if it is on (System Settings > Network > "
             f"Firewall), the socketfilterfw line allows incoming connections for the programs that accept "
             f"them, with the conda env active: its Python, and Ray's raylet and gcs_server.",
             "   macOS 15+ Local Network privacy: programs run from Terminal are exempt (Apple TN3179); run from "
             "another app (iTerm2, VS Code), macOS asks once for that app: Allow it (System Settings > Privacy & "
             "Security > Local Network), or Ray here cannot reach the desktop. Keep that window open during a run.",
             f"3) join ({RAY_MAC_CLUSTER_ENV}=1 on that line only: set for every process it moves even "
             f"a local Ray off 127.0.0.1).",
             "4) the last line checks from here (the head asks for the token: RAY_AUTH_MODE=token in this "
             "shell, and in the one that starts a notebook here).",
             STOP_NOTE]
    lines = [tk_line, MACOS_FIREWALL_LINE, shell_line(argv, env),
             f"export {RAY_AUTH_ENV}=token && hetlab doctor --head {shlex.quote(argv[2].split('=', 1)[1])}"]
    return block(notes, "the Mac's Terminal", stop_at_failure(lines))


# --- day two: run the printed line (``hetlab head/join --start``) -------------------------------------

START_LIMIT_S = 180.0  # a `ray start` that has not ended by then will not: Ray retries its GCS for minutes


def start(argv: list[str], env: dict) -> int:
    """``hetlab head/join --start`` (day two): run the printed ``ray start`` line; its exit status.
    One line, before Ray starts, without the token file, with ``MAC_IP`` in the line, or when the
    head does not answer; a failure, or no end within ``START_LIMIT_S``, is one line too."""
    if not any(path.is_file() and path.stat().st_size for path in token_files()):
        raise HetlabError(f"no Ray token in {TOKEN_PATH} here: --start brings back a pair set up "
                          f"before; print the steps (the same command without --start) and follow "
                          f"its token step first.")
    if "--node-ip-address=MAC_IP" in argv:
        raise HetlabError("--start needs this machine's LAN IP: add --ip (macOS: ipconfig getifaddr en0).")
    secure_token_files()
    head = next((a.split("=", 1)[1] for a in argv if a.startswith("--address=")), None)
    if head:
        head_answers(head)
    flag = head_flag(head)
    print(f"hetlab: running {shell_line(argv, env)}", flush=True)
    started = time.time()
    with tempfile.TemporaryFile("w+") as log:   # a file, not a pipe: the daemons Ray starts may keep it open
        try:
            ray_start = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
        except FileNotFoundError:
            raise HetlabError("no `ray` command here: activate the course's environment first "
                              "(conda activate hetlab).") from None
        try:
            ray_start.wait(timeout=START_LIMIT_S)
        except subprocess.TimeoutExpired:
            stop_children_since(started)   # the `ray start` and what it started, by PID
            raise HetlabError(f"`ray start` had not ended after {START_LIMIT_S:.0f} s (its node could not join"
                              f"{f' {head}' if head else ''}), so hetlab stopped it: run `hetlab doctor{flag}` here.") from None
        log.seek(0)
        said = log.read()
    if ray_start.returncode == 0:
        print(said, end="", flush=True)
        return 0
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    raise HetlabError(f"`ray start` failed (exit {ray_start.returncode}): {(lines or ['no output'])[-1][:240]} — "
                      f"run `hetlab doctor{flag}` here for the full check.")


def head_flag(head: str | None) -> str:
    """`` --head ADDRESS`` for a doctor line to copy, quoted (zsh globs ``[fd00::10]:6379``)."""
    return f" --head {shlex.quote(head)}" if head else ""


def head_answers(head: str) -> None:
    """One line, in seconds, when the head's GCS port does not answer from here (``connecting.port_open``)."""
    host, port = parse_address(head)
    problem = port_open(host, port, timeout=5.0)
    if problem:
        raise HetlabError(f"the head at {head} does not answer from here: {problem}. Start it first "
                          f"(`hetlab head --start` on the desktop); if it runs, its firewall may not admit "
                          f"this machine's address (`hetlab doctor{head_flag(head)}` checks both).")
