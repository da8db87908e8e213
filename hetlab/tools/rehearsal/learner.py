"""The learner's own steps, run as a learner runs them, on the rehearsal's two hosts (notebook 04, README).

``commands_in`` refuses a printed comment that reads as a command and a placeholder left; ``paste``
feeds the printed text whole into the host's shell (zsh on the "mac", bash on the desktop) and counts
each line that ran; ``notebook`` runs a notebook cell by cell in the desktop host, each cell's output
written as it ends; ``readme_blocks`` reads the README's marked blocks. Labelled stand-ins for what
cannot exist here: ``sudo`` (root already), macOS's ``socketfilterfw`` (recorded), ``ssh`` (no server).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil

from hetlab.errors import HetlabError
from hetlab.tools.rehearsal.hosts import DESKTOP, ROOT, Host, _in, host_env

PLACEHOLDERS = ("MAC_IP", "DESKTOP_IP", "DESKTOP_USER", "MAC_USER", "WINDOWS_LAN_IP")
# a comment that starts like a command was meant to run: pasted, it does nothing
COMMAND_WORDS = re.compile(r"^#\s*(sudo |ray (start|stop|get-auth-token)|hetlab (head|join|doctor)|ufw |"
                           r"for \w+ in |mkdir |ssh |chmod |export |nft |iptables |netsh |New-Net)")
MARK = "@@hetlab-ran"
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
    """The printed lines a learner runs: every line that is not a comment. One HetlabError names a
    comment that should have been a command, or a placeholder left where the value was known."""
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        if COMMAND_WORDS.match(line.strip()):
            raise HetlabError(f"a printed line is a comment that should be a command: {line.strip()[:100]}")
    found = [line for line in lines if not line.lstrip().startswith("#")]
    for line in found:
        command = re.split(r"\s#\s", line, maxsplit=1)[0]   # a trailing note may name a placeholder
        left = [p for p in PLACEHOLDERS if re.search(rf"\b{p}\b", command)]
        if left:
            raise HetlabError(f"a printed line still holds {left[0]}: {line.strip()[:100]}")
    return found


def make_standins() -> Path:
    """Write the stand-ins (``sudo``, ``ssh``) into a folder that goes first on the hosts' PATH."""
    folder = STANDINS / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("sudo", SUDO), ("ssh", SSH)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder


def learner_env(host: Host) -> dict:
    """A terminal on ``host``: its home, its figures folder, the course's environment on PATH, the stand-ins first."""
    env = host_env(host)
    env["PATH"] = f"{STANDINS / 'bin'}:{env['PATH']}"
    return env


def paste(host: Host, text: str, timeout: float = 300, here: dict | None = None) -> dict:
    """Paste ``text`` (printed by hetlab) into ``host``'s shell as a whole, as a learner does; return
    ``{"ran": n, "commands": n, "output": …, "said": {line: its output}}``. Raises when a line fails or is
    skipped. ``here``: run it in this machine's shell with that environment instead (the harness's own tests)."""
    lines = commands_in(text)
    fed, n = [], 0
    for line in text.splitlines():
        fed.append(line)
        if line.strip() and not line.lstrip().startswith("#"):
            n += 1
            fed.append(f"echo '{MARK} {n}'")
    shell = SHELLS[host.role] + ["-e"]
    started = time.time()
    done = subprocess.run(shell if here is not None else _in(host, shell), input="\n".join(fed) + "\nexit 0\n",
                          env=here if here is not None else learner_env(host),
                          capture_output=True, text=True, timeout=timeout, start_new_session=True)
    output = done.stdout + done.stderr
    ran = len(re.findall(rf"^{MARK} \d+$", done.stdout, re.M))
    said = re.split(rf"^{MARK} \d+\n?", done.stdout, flags=re.M)[:ran]   # what each line printed
    record = {"host": host.role, "ran": ran, "commands": len(lines), "seconds": round(time.time() - started, 1),
              "output": output, "said": dict(zip(lines, said))}
    if done.returncode != 0 or ran != len(lines):
        failed = lines[ran] if ran < len(lines) else "(after the last line)"
        raise HetlabError(f"rehearsal: on the {host.role} host {ran} of {len(lines)} printed lines ran; it "
                          f"stopped at: {failed[:120]} — {' '.join(output.split())[-300:]}")
    return record


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


def notebook(path: Path, out: Path, env: dict, cwd: Path, timeout: float = 900) -> subprocess.Popen:
    """Start running the notebook ``path`` cell by cell in the desktop host; each code cell's output
    is appended to ``out`` (one JSON line: index, id, tags, text, error) as soon as the cell ends."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("")
    argv = [sys.executable, "-m", "hetlab.tools.rehearsal.learner", str(path), str(out), str(timeout)]
    return subprocess.Popen(_in(DESKTOP, argv), env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def cells_so_far(out: Path) -> list[dict]:
    """The cells that have finished, in order (``notebook``'s file)."""
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []


def wait_for_cell(out: Path, tag: str, runner: subprocess.Popen, timeout: float = 600) -> dict:
    """The finished cell tagged ``tag``: its output text (a failed cell or a stopped run: one error)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        cells = cells_so_far(out)
        bad = [c for c in cells if c["error"]]
        if bad:
            raise HetlabError(f"rehearsal: notebook cell {bad[0]['index']} failed: {bad[0]['error'][-600:]}")
        mine = [c for c in cells if tag in c["tags"]]
        if mine:
            return mine[0]
        if runner.poll() is not None:
            raise HetlabError(f"rehearsal: the notebook stopped before its {tag!r} cell: {runner.stdout.read()[-600:]}")
        time.sleep(0.5)
    raise HetlabError(f"rehearsal: no {tag!r} cell within {timeout:.0f} s")


def _run_cells(path: str, out: str, timeout: str) -> int:
    """``python -m hetlab.tools.rehearsal.learner NOTEBOOK OUT TIMEOUT`` (inside the desktop host)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=float(timeout), kernel_name="python3",
                            resources={"metadata": {"path": str(Path(path).parent)}})
    with client.setup_kernel(), open(out, "a") as sink:
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            error = ""
            try:
                client.execute_cell(cell, index)
            except CellExecutionError as exc:
                error = str(exc)
            text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
            sink.write(json.dumps({"index": index, "id": cell.get("id"), "tags": cell.metadata.get("tags", []),
                                   "text": text, "error": error}) + "\n")
            sink.flush()
            if error:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(_run_cells(*sys.argv[1:4]))


# --- the README's command blocks ------------------------------------------------------------------
RUNS_ON = re.compile(r"<!-- runs on: ([a-z, ]+) -->")
NOT_RUN = re.compile(r"<!-- not run here: (.+?) -->")
TAKES = re.compile(r"#\s*([A-Z][A-Z_]+_(?:IP|USER)):")   # `whoami  # DESKTOP_USER: …` names what it prints


def readme_blocks(text: str) -> list[dict]:
    """Every fenced block of the README with its mark: ``{"line", "hosts" (empty: not run), "why", "code"}``.
    A block with no mark is one HetlabError: each says where it runs, or why it is not run here."""
    blocks, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```") and len(lines[i]) > 3:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            mark = lines[i - 1] if i else ""
            runs, why = RUNS_ON.fullmatch(mark.strip()), NOT_RUN.fullmatch(mark.strip())
            if not (runs or why):
                raise HetlabError(f"README line {i + 1}: a command block without `<!-- runs on: … -->` or "
                                  f"`<!-- not run here: … -->` before it")
            blocks.append({"line": i + 1, "hosts": [h.strip() for h in runs.group(1).split(",")] if runs else [],
                           "why": why.group(1) if why else "", "code": "\n".join(lines[i + 1:end])})
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
    """The values a pasted block printed for later ones: ``hostname -I  # DESKTOP_IP: …`` → its first word."""
    found = {}
    for line, said in record["said"].items():
        name = TAKES.search(line)
        if name and said.split():
            found[name.group(1)] = said.split()[0]
    return found
