"""The learner's own steps, run as a learner runs them, on the rehearsal's two hosts (notebook 04, README).

``commands_in`` refuses a printed comment that reads as a command and a placeholder left; ``paste``
pastes the printed block whole into the host's interactive shell on a pseudo-terminal with bracketed
paste, as a terminal does (zsh on the "mac", bash on the desktop), and reports how it ended
(notebooks run cell by cell: ``cells``); ``readme_blocks`` reads the README's marked blocks. Labelled stand-ins for what
cannot exist here: ``sudo`` (root already), macOS's ``socketfilterfw`` (recorded), ``ssh`` (no server); every
paste on the mac role finds macOS's command set on its PATH (``macos``).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from hetlab.cluster import commands
from hetlab.errors import HetlabError
from harness.rehearsal import macos
from harness.rehearsal.hosts import DESKTOP, ROOT, Host, inside, host_env

PLACEHOLDERS = ("MAC_IP", "DESKTOP_IP", "DESKTOP_USER", "MAC_USER", "WINDOWS_LAN_IP")
# a comment that starts like a command was meant to run: pasted, it does nothing
COMMAND_WORDS = re.compile(r"^#\s*(sudo |ray (start|stop|get-auth-token)|hetlab (head|join|doctor)|ufw |"
                           r"for \w+ in |mkdir |ssh |chmod |export |nft |iptables |netsh |New-Net)")
STANDINS = ROOT / "standins"
SHELLS = {"desktop": ["bash", "--norc", "--noprofile", "-i"], "mac": ["zsh", "-f", "-i"]}

SUDO = """#!/bin/sh
# rehearsal stand-in for sudo: the rehearsal runs as root, so the command runs as it is. macOS's
# socketfilterfw cannot exist here: its calls are recorded in ~/socketfilterfw.log, not run.
case "$1" in */socketfilterfw) echo "$*" >> "$HOME/socketfilterfw.log"; exit 0;; esac
exec "$@"
"""
SSH = f"""#!/bin/sh
# rehearsal stand-in for ssh: no SSH server runs here. The remote command runs in the desktop host's
# home, as the desktop's user would run it there; any other host is refused.
while [ $# -gt 0 ]; do case "$1" in -[oplLRiFJ]) shift 2;; -*) shift;; *) break;; esac; done
dest="$1"; shift
case "${{dest#*@}}" in {DESKTOP.ip}) ;; *) echo "ssh (rehearsal stand-in): only the desktop host {DESKTOP.ip}" >&2; exit 255;; esac
cd "{DESKTOP.home}" && HOME="{DESKTOP.home}" exec sh -c "$*"
"""


def commands_in(text: str) -> list[str]:
    """The commands a learner pastes: the printed block's (the text itself where it has no markers), without
    the line numbers that stop it at a failed one (``commands.steps``). One HetlabError names a comment that
    should have been a command, any other ``#`` note inside the block (zsh, the Mac's shell, runs it as a
    command), or a placeholder left where the value was known."""
    lines = commands.steps(blocks_or_text(text))
    for line in lines:
        if COMMAND_WORDS.match(line.strip()):
            raise HetlabError(f"a printed line is a comment that should be a command: {line.strip()[:100]}")
        if line.lstrip().startswith("#") or re.search(r"\s#\s", line):
            raise HetlabError(f"a # note inside a block to paste (zsh runs it as a command): {line.strip()[:100]}")
    for line in lines:
        left = [p for p in PLACEHOLDERS if re.search(rf"\b{p}\b", line)]
        if left:
            raise HetlabError(f"a printed line still holds {left[0]}: {line.strip()[:100]}")
    return lines


def make_standins() -> Path:
    """Write the stand-ins (``sudo``, ``ssh``) into a folder that goes first on the hosts' PATH, and the
    mac host's macOS command set (``macos``: it lasts as long as the rehearsal, as Ray's processes do)."""
    folder = STANDINS / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("sudo", SUDO), ("ssh", SSH)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    macos.build(STANDINS / "macos")
    return folder


def learner_env(host: Host) -> dict:
    """A terminal on ``host``: its home, its figures folder, the course's environment on PATH, the stand-ins
    first; on the mac, macOS's command set in place of the system folders."""
    env = host_env(host)
    path = env["PATH"]
    if host.role == "mac":
        if not (STANDINS / "macos" / macos.MARK).exists():       # a rehearsal set up before it had one
            macos.build(STANDINS / "macos")
        path = macos.shell_path(path, STANDINS / "macos")
    env["PATH"] = f"{STANDINS / 'bin'}:{path}"
    return env


BRACKETED_ON, BRACKETED_OFF = b"\x1b[?2004h", b"\x1b[?2004l"     # what a shell writes to turn bracketed paste on/off
PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"              # what a terminal wraps a paste in
STATUS = "@@hetlab-status"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|[\x07\x08]")


def paste(host: Host, text: str, timeout: float = 300, here: dict | None = None, lint: bool = True) -> dict:
    """Paste ``text``'s block whole into ``host``'s interactive shell (zsh -f -i / bash -i, default options) on a
    pseudo-terminal, as a terminal does: once the shell turned bracketed paste on (ESC[?2004h), exactly the
    block between ESC[200~ and ESC[201~, then Enter. Then it types ``echo "@@hetlab-status $?"`` after the
    paste: the last line's status, and proof the shell is back at its prompt (not at ``quote>``). What each
    line did, the caller counts from its effects. Returns ``{"status", "commands", "output", "said"}``; a
    HetlabError when bracketed paste never came on, the shell refused a line or waits, or the status is not
    0. ``here``: this machine's shell with that environment; ``lint=False``: no ``commands_in`` check first.
    """
    shell = SHELLS[host.role]
    if here is not None:               # the shell itself by its path: a block's stand-ins may share its name
        return _paste([shutil.which(shell[0]) or shell[0], *shell[1:]], host.role, text, here, timeout, lint)
    return _paste(inside(host, shell), host.role, text, learner_env(host), timeout, lint)


def _paste(argv: list[str], role: str, text: str, env: dict, timeout: float, lint: bool = True) -> dict:
    if role == "mac" and not macos.on_path(env.get("PATH", "")):     # a paste here: macOS's commands for it alone
        with tempfile.TemporaryDirectory(prefix="hetlab-macos-") as folder:
            env = {**env, "PATH": macos.shell_path(env.get("PATH", "/usr/bin:/bin"), macos.build(Path(folder)))}
            return _paste(argv, role, text, env, timeout, lint)
    argv = [shutil.which(argv[0]) or argv[0], *argv[1:]]    # found here: the shell's own PATH may lack it (ip)
    found = blocks_or_text(text)
    lines = commands_in(text) if lint else commands.steps(found)
    env = dict(env)
    if env.get("TERM", "dumb") == "dumb":
        env["TERM"] = "xterm-256color"     # a terminal emulator's TERM: readline turns bracketed paste off for "dumb"
    started = time.time()
    transcript, status = _pty_paste(argv, found, env, timeout)
    output = _output(transcript)
    out_lines = [line for line in output.splitlines() if line.strip()]
    record = {"host": role, "commands": len(lines), "status": status,
              "seconds": round(time.time() - started, 1), "output": output,
              "said": dict(zip(lines, out_lines)) if len(out_lines) == len(lines) else {}}
    refused = [line for line in out_lines if re.match(r"(zsh|bash|-?bash-[\d.]+): ", line)]
    if refused:                                    # the shell itself refused a line: a parse error, a bad pattern
        raise HetlabError(f"rehearsal: the {role} host's shell refused the paste: {refused[0][:200]}")
    if status != 0:                                # a printed block names its failed line (commands.stop_at_failure)
        stopped = re.search(r"hetlab: line (\d+) of this block failed", output)
        at = stopped and commands.steps(found)[int(stopped.group(1)) - 1]
        raise HetlabError(f"rehearsal: the paste into the {role} host's shell ended with status {status}"
                          + (f", stopped at its line {stopped.group(1)} ({at[:120]})" if at else "")
                          + f": {' '.join(output.split())[-600:]}")
    return record


def blocks_or_text(text: str) -> str:
    """What a learner pastes of printed ``text``: its one marked block (``commands.blocks``), or all of it."""
    found = commands.blocks(text)
    if len(found) > 1:
        raise HetlabError(f"rehearsal: {len(found)} blocks in one printed text: paste each on its own machine")
    return found[0][1] if found else text


def _pty_paste(argv: list[str], text: str, env: dict, timeout: float) -> tuple[bytes, int]:
    """Run ``argv`` on a new pseudo-terminal, paste ``text`` with bracketed paste, Enter; return the
    terminal's whole output and the status the shell then reports for its last command."""
    import fcntl
    import os
    import select
    import signal
    import termios

    master, slave = os.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                            start_new_session=True,
                            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))   # the shell's own terminal
    os.close(slave)
    seen, heard = bytearray(), [time.time()]        # the terminal's output, and when it last said something

    def until(done, seconds: float) -> bool:
        end = time.time() + seconds
        while time.time() < end:
            if done():
                return True
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    return done()
                if not chunk:
                    return done()
                seen.extend(chunk)
                heard[0] = time.time()
        return done()

    try:
        if not until(lambda: BRACKETED_ON in seen, min(30.0, timeout)):
            raise HetlabError("rehearsal: the shell never turned bracketed paste on (no ESC[?2004h): a paste "
                              "into it would run line by line, not as a terminal pastes; " + _tail(seen))
        before = len(seen)
        os.write(master, PASTE_START + text.encode() + PASTE_END)
        end = _flat(text.splitlines()[-1].encode())[-12:]       # the editor took it: its echo ends so, or (a
        until(lambda: end in _flat(bytes(seen[before:]))         # long line's echo wraps, bash's repeats a
              or (len(seen) > before and time.time() - heard[0] > 0.3), 5)    # character) it went quiet
        mark = len(seen)
        os.write(master, b"\r")                                             # Enter
        if not until(lambda: BRACKETED_ON in seen[mark:], timeout):
            raise HetlabError(f"rehearsal: the paste did not finish within {timeout:.0f} s; " + _tail(seen))
        typed = len(seen)
        os.write(master, f'echo "{STATUS} $?"\r'.encode())
        answer = re.compile(rf"{STATUS} (\d+)".encode())
        if not until(lambda: answer.search(bytes(seen[typed:])), 8):
            raise HetlabError("rehearsal: after the paste the shell waits for more input (an open quote, or "
                              "a parse error): " + _tail(seen, mark))
        status = int(answer.search(bytes(seen[typed:])).group(1))
        os.write(master, b"exit\r")
        until(lambda: proc.poll() is not None, 10)
        return bytes(seen[:typed]), status
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait(timeout=10)
        os.close(master)


def _flat(echo: bytes) -> str:
    """A terminal's echo without its escapes and white space (zsh wraps a long line with them)."""
    return re.sub(r"\s+", "", ANSI.sub("", echo.decode(errors="replace")))


def _output(transcript: bytes) -> str:
    """What the pasted commands printed: from the shell's ESC[?2004l after Enter to its next prompt."""
    start = transcript.rfind(BRACKETED_OFF)
    end = transcript.rfind(BRACKETED_ON)
    body = transcript[start + len(BRACKETED_OFF):end] if 0 <= start < end else transcript
    text = ANSI.sub("", body.decode(errors="replace")).replace("\r\n", "\n").replace("\r", "")
    lines = text.split("\n")
    return "\n".join(lines[:-1] if len(lines) > 1 else lines)      # the last: the next prompt


def _tail(seen: bytearray, start: int = 0) -> str:
    return " ".join(ANSI.sub("", bytes(seen[start:]).decode(errors="replace")).split())[-300:]


def kill_since(host: Host, started: float) -> None:
    """Stop the processes of ``host`` that started after ``started`` (a failed ``ray start``), by PID."""
    pids = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split()
    for pid in map(int, pids):
        try:
            proc = psutil.Process(pid)
            if proc.create_time() >= started:
                proc.kill()
        except psutil.Error:
            pass


# --- the README's command blocks ------------------------------------------------------------------
RUNS_ON = re.compile(r"<!-- runs on: ([a-z, ]+) -->")
NOT_RUN = re.compile(r"<!-- not run here \(([a-z, ]+)\): (.+?) -->")   # its machines (or python), and why
# what a README line prints that a later block takes, as the README's text around the block names it
TAKES = {"whoami": "DESKTOP_USER", "hostname -I": "DESKTOP_IP"}
EXAMPLES = {"DESKTOP_USER": "ana", "DESKTOP_IP": "192.168.1.10", "MAC_IP": "192.168.1.20"}   # for blocks not run
SHELL_WORDS = {"cd", "export", "for", "while", "do", "done", "read", "if", "then", "fi", "else", "echo", "printf",
               "true", "umask", "[", "test"}
KEYWORDS = {"do", "then", "else", "if", "while", "until", "!"}     # a command follows them
REAL_HERE = {"mkdir", "rm"}     # run for real by a stand-in paste: they touch only its private HOME


def readme_blocks(text: str) -> list[dict]:
    """Every fenced block of the README with its mark: ``{"line", "hosts" (empty: not run), "machines"
    (where a block not run here would run), "why", "code"}``. A block with no mark is one HetlabError:
    each says where it runs, or on which machine and why it is not run here."""
    blocks, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```") and len(lines[i]) > 3:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            mark = lines[i - 1] if i else ""
            runs, why = RUNS_ON.fullmatch(mark.strip()), NOT_RUN.fullmatch(mark.strip())
            if not (runs or why):
                raise HetlabError(f"README line {i + 1}: a command block without `<!-- runs on: … -->` or "
                                  f"`<!-- not run here (MACHINE): … -->` before it")
            blocks.append({"line": i + 1, "hosts": [h.strip() for h in runs.group(1).split(",")] if runs else [],
                           "machines": [h.strip() for h in why.group(1).split(",")] if why else [],
                           "why": why.group(2) if why else "", "code": "\n".join(lines[i + 1:end])})
            i = end
        i += 1
    return blocks


def fill_in(code: str, values: dict) -> str:
    """The block as the learner runs it: each placeholder the README names replaced by what an earlier
    block printed (``values``); one left over fails in ``commands_in``."""
    for name, value in values.items():
        code = re.sub(rf"\b{name}\b", value, code)
    return code


def taken(record: dict) -> dict:
    """The values a pasted block printed for later ones (``TAKES``): ``hostname -I`` → its first word."""
    found = {}
    for line, said in record["said"].items():
        if line.strip() in TAKES and said.split():
            found[TAKES[line.strip()]] = said.split()[0]
    return found


def programs(code: str) -> list[str]:
    """The programs a block runs, in order: each simple command's first word after its ``VAR=value``
    assignments (shell words such as ``cd`` or ``for`` are the shell's own, not programs)."""
    import shlex
    found = []
    for line in code.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        first = True
        for word in lexer:
            if word and set(word) <= set("&|;()"):
                first = True
            elif first and word in KEYWORDS:
                continue
            elif first and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word):
                if word not in SHELL_WORDS:
                    found.append(word)
                first = False
    return found


def standins_for(code: str) -> list[str]:
    """The programs of ``code`` that a stand-in paste replaces, in the order they run (``REAL_HERE`` runs)."""
    return [name for name in programs(code) if name not in REAL_HERE]


def paste_with_standins(block: dict, role: str, folder: Path, timeout: float = 60) -> list[str]:
    """A README block not run here, pasted as ``paste`` does into ``role``'s shell on this machine, its
    programs replaced by labelled recording stand-ins (each writes "name args" to ``folder/ran.log`` and
    prints one line, so that a ``| while read`` loop runs once)
    and its placeholders by example addresses, in a private HOME with a stand-in token file: its parse
    is tested where it cannot run. Returns the
    programs that ran, in order."""
    bin_dir = folder / "standins"
    bin_dir.mkdir(parents=True, exist_ok=True)
    code = fill_in(block["code"], EXAMPLES)
    for name in set(standins_for(code)):
        (bin_dir / name).write_text(f'#!/bin/sh\n# stand-in for {name} (not run here): records its call, prints one line\n'
                                    f'echo "{name} $*" >> "{folder}/ran.log"\necho "{name} (stand-in)"\n')
        (bin_dir / name).chmod(0o755)
    (folder / ".ray").mkdir(exist_ok=True)          # the token file a machine of the pair has (a stand-in)
    (folder / ".ray" / "auth_token").write_text("stand-in token")
    env = {"HOME": str(folder), "PATH": f"{bin_dir}:/usr/bin:/bin", "TERM": "xterm-256color"}
    _paste([shutil.which(SHELLS[role][0]), *SHELLS[role][1:]], role, code, env, timeout)
    log = folder / "ran.log"
    return [line.split(" ", 1)[0] for line in log.read_text().splitlines()] if log.exists() else []
