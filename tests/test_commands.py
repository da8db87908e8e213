"""hetlab.cluster.commands: the printed ray start commands, checked as text and then run for real.

The real test starts a head and a joining node on 127.0.0.1 with exactly the argv
that hetlab prints (free ports chosen here, a private temp dir and HOME so the token
is ours alone), then checks: two nodes with their roles, an actor pinned to the
"mac" role lands there, clients without / with a wrong token are refused in seconds,
every listening port is one hetlab listed, the dashboard listens on 127.0.0.1 only.
It stops only its own processes (their process groups, then any leftover by PID). Where the
two-host rehearsal runs (root, as in CI), tests/test_rehearsal.py checks the same across its hosts.
"""
import glob
import json
import os
import random
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

import psutil
import pytest

from hetlab import HetlabError
from hetlab.cluster import commands
from harness import rehearsal
from hetlab.cluster.commands import Ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def test_head_command_pins_everything():
    argv, env = commands.head_start("192.168.1.10")
    text = commands.shell_line(argv, env)
    assert "AUTOSCALER_METRIC_PORT=8266" in text and "DASHBOARD_METRIC_PORT=8267" in text
    for part in ["RAY_AUTH_MODE=token", "--head", "--node-ip-address=192.168.1.10", "--port=6379",
                 "--dashboard-host=127.0.0.1", "--node-manager-port=6380", "--object-manager-port=6381",
                 "--runtime-env-agent-port=6382", "--dashboard-agent-grpc-port=6383",
                 "--dashboard-agent-listen-port=6384", "--metrics-export-port=6385",
                 "--ray-client-server-port=10001", "--min-worker-port=10002", "--max-worker-port=10063",
                 "--labels=hetlab-role=desktop", '{"hetlab-role:desktop":1.0}']:
        assert part in text
    assert commands.firewall_ranges(Ports(), head=True) == ["6379-6385", "10001-10063"]
    assert commands.firewall_ranges(Ports(), head=False) == ["6380-6385", "10002-10063"]


def test_join_command_for_the_mac():
    argv, env = commands.join_start("192.168.1.10", "192.168.1.20")
    text = commands.shell_line(argv, env)
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1" in text and "RAY_AUTH_MODE=token" in text
    assert "--address=192.168.1.10:6379" in argv and "--node-ip-address=192.168.1.20" in argv
    assert "--labels=hetlab-role=mac" in argv and "--head" not in argv
    assert "--node-ip-address=MAC_IP" in commands.join_start("192.168.1.10", None)[0]


def _commands(text):
    """The lines a learner runs: the printed block's (not the notes before it)."""
    return commands.pasted(text)


def test_the_token_travels_over_ssh_with_a_by_hand_route_kept():
    """The Mac already reaches the desktop over SSH (it cloned the course from it): its one token line
    reads the desktop's file into a private one. No scp, no RAY_AUTH_TOKEN. Without SSH, the printed
    note names the by-hand route: the token typed into `read -rs` (zsh and bash), never echoed."""
    head = commands.render_head("192.168.1.10")
    assert "ray get-auth-token --generate" in head and "chmod 600 ~/.ray/auth_token" in head
    mac = commands.render_join("192.168.1.10", "192.168.1.20", head_user="ana")
    for text in (head, mac):
        for other_route in ("scp", "RAY_AUTH_TOKEN", "prefer "):
            assert other_route not in text, (other_route, text)
    writes = [line for line in _commands(mac) if "auth_token" in line]
    assert writes == ["mkdir -p ~/.ray && (umask 077 && TOKEN=$(ssh ana@192.168.1.10 'cat ~/.ray/auth_token') "
                      "&& [ -n \"$TOKEN\" ] && printf %s \"$TOKEN\" > ~/.ray/auth_token) && chmod 600 "
                      "~/.ray/auth_token"], writes
    assert "read -rs" in mac and not any("read -rs" in line for line in _commands(mac))   # a note, not a step
    assert "DESKTOP_USER@192.168.1.10" in commands.render_join("192.168.1.10", "192.168.1.20")  # unknown: named


def _stub_ray(tmp_path, monkeypatch, status=0):
    """A private HOME and a stand-in `ray` first on PATH that records its arguments and environment
    and exits with ``status``: `--start` is checked without starting Ray (test_printed_commands_make_an_
    authenticated_two_node_cluster starts a real pair from the same head_start/join_start pairs)."""
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    (home / ".ray").mkdir(parents=True)
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "$HOME/ray.args"\nenv > "$HOME/ray.env"\n'
                                 f'exit {status}\n')
    (bin_dir / "ray").chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    for name in ("RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    return home


def _printed_start(capsys, args):
    """The `ray start` line that `hetlab ARGS` prints: (argv, environment, the line itself)."""
    from hetlab.tools import cli
    assert cli.main(args) == 0
    line = next(line for line in commands.steps(capsys.readouterr().out) if " ray start " in line)   # stdout: the block
    words = shlex.split(line)
    at = words.index("ray")
    return words[at:], dict(word.split("=", 1) for word in words[:at]), line


@pytest.mark.parametrize("args", [["head", "--ip", "192.168.1.10"],
                                  ["join", "--head", "127.0.0.1", "--ip", "192.168.1.20", "--port", "PORT"]])
def test_start_runs_the_printed_line_with_its_environment(args, tmp_path, monkeypatch, capsys):
    """Day two: `hetlab head/join ... --start` runs exactly the line the steps print, says what it
    ran, makes the token private, and a failed ray start is one hetlab line with its exit status.
    A join first tries the head's port: here a loopback listener stands for the head."""
    from hetlab.tools import cli
    home = _stub_ray(tmp_path, monkeypatch, status=7)
    token = home / ".ray" / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o644)  # as Ray writes it: the start makes it private
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen(4)
        args = [str(head.getsockname()[1]) if a == "PORT" else a for a in args]
        argv, env, line = _printed_start(capsys, args)
        assert cli.main(args + ["--start"]) == 2
    out, err = capsys.readouterr()
    assert out == f"hetlab: running {line}\n" and err.startswith("HetlabError: `ray start` failed (exit 7)")
    assert (home / "ray.args").read_text().splitlines() == argv[1:]
    ran_env = dict(row.split("=", 1) for row in (home / "ray.env").read_text().splitlines() if "=" in row)
    assert env and {key: ran_env.get(key) for key in env} == env
    assert (token.stat().st_mode & 0o777) == 0o600


@pytest.mark.parametrize("token, args, says", [
    (None, ["head", "--ip", "192.168.1.10"], "no Ray token in ~/.ray/auth_token here"),
    ("", ["join", "--head", "192.168.1.10", "--ip", "192.168.1.20"], "no Ray token in ~/.ray/auth_token here"),
    ("abc", ["join", "--head", "192.168.1.10"], "--start needs this machine's LAN IP"),
])
def test_start_refuses_in_one_line_before_ray_starts(token, args, says, tmp_path, monkeypatch, capsys):
    from hetlab.tools import cli
    home = _stub_ray(tmp_path, monkeypatch)
    if token is not None:
        (home / ".ray" / "auth_token").write_text(token)
    assert cli.main(args + ["--start"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"HetlabError: {says}") and err.count("\n") == 1, err
    assert not (home / "ray.args").exists()  # ray start never ran


def test_a_doctor_line_to_copy_quotes_an_ipv6_head():
    """zsh reads an unquoted `[fd00::10]:6379` as a glob pattern ("no matches found") and runs nothing:
    the lines hetlab gives to copy quote it. Here the head is IPv6 loopback's closed port 1."""
    with pytest.raises(HetlabError) as info:
        commands.head_answers("[::1]:1")
    assert "(`hetlab doctor --head '[::1]:1'` checks both)" in str(info.value) and "\n" not in str(info.value)
    join = _commands(commands.render_join("fd00::10", "fd00::20", head_user="ana"))
    assert join[-1] == "export RAY_AUTH_MODE=token && hetlab doctor --head '[fd00::10]:6379'"
    assert commands.gcs_address("fd00::10", 6379) == "[fd00::10]:6379" and commands.gcs_address("10.0.0.1", 1) == "10.0.0.1:1"


def test_the_token_line_writes_a_private_file(tmp_path):
    """Run the joining machine's token line for real, in bash with a private HOME; `ssh` is a stand-in
    (no SSH server here) that runs the command in the desktop's home, as sshd would. With no token on the
    desktop the fetch fails, and the line fails too, leaving no token file (an empty one would pass for
    a token until Ray refused it)."""
    desktop, home, bin_dir = tmp_path / "desktop", tmp_path / "mac", tmp_path / "bin"
    for folder in (desktop / ".ray", home, bin_dir):
        folder.mkdir(parents=True)
    token = secrets.token_hex(32)
    (desktop / ".ray" / "auth_token").write_text(token)
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nshift\ncd "{desktop}" && HOME="{desktop}" exec sh -c "$*"\n')
    (bin_dir / "ssh").chmod(0o755)
    line = next(line for line in _commands(commands.render_join("192.168.1.10", None, head_user="ana"))
                if "auth_token" in line)
    env = {"HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    (desktop / ".ray" / "auth_token").rename(desktop / ".ray" / "elsewhere")
    failed = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30, env=env)
    assert failed.returncode != 0 and "No such file" in failed.stderr, failed
    assert list((home / ".ray").iterdir()) == []
    (desktop / ".ray" / "elsewhere").rename(desktop / ".ray" / "auth_token")
    subprocess.run(["bash", "-c", line], text=True, check=True, timeout=30, env=env)
    path = home / ".ray" / "auth_token"
    assert path.read_text() == token and (path.stat().st_mode & 0o777) == 0o600


def test_firewall_and_opt_in_text_belong_to_the_mac_only():
    head = commands.render_head("192.168.1.10")
    mac = commands.render_join("192.168.1.10", "192.168.1.20")
    assert "per APPLICATION" in mac and "Local Network" in mac and "socketfilterfw --add" in mac
    assert "socketfilterfw" not in head and "Local Network" not in head
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in head
    # the Mac's opt-in sits on its `ray start` line, nowhere else that runs
    assert [line for line in _commands(mac) if "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" in line] == \
        [line for line in _commands(mac) if " ray start " in line]


def test_the_mac_firewall_line_names_programs_that_exist():
    """The Mac's line finds the programs from the active Python's Ray; run its finder here."""
    line = next(line for line in _commands(commands.render_join("192.168.1.10", None)) if "socketfilterfw" in line)
    finder = line.split(" | ", 1)[0].replace("python -c", f"{sys.executable} -c", 1)
    out = subprocess.run(["bash", "-c", finder], capture_output=True, text=True, check=True, timeout=60)
    apps = out.stdout.split()
    assert [os.path.basename(a) for a in apps[1:]] == ["raylet", "gcs_server"]
    assert all(os.access(a, os.X_OK) for a in apps), apps


@pytest.mark.parametrize("call", [
    lambda: commands.head_start("192.168.1.x"),
    lambda: commands.join_start("192.168.1.10", "my-mac.local"),
])
def test_bad_input_is_one_line(call):
    with pytest.raises(HetlabError) as info:
        call()
    assert "\n" not in str(info.value)


def _free_block(size: int) -> int:
    """First port of ``size`` consecutive ports that are free on 127.0.0.1 right now."""
    for _ in range(200):
        base = random.randint(20000, 60000 - size)
        try:
            for port in range(base, base + size):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free port block")


def _ports(base: int) -> Ports:
    return Ports(gcs=base, node_manager=base + 1, object_manager=base + 2, runtime_env_agent=base + 3,
                 dashboard_agent_grpc=base + 4, dashboard_agent_http=base + 5, metrics_export=base + 6,
                 dashboard=base + 7, client_server=base + 8, min_worker=base + 9, max_worker=base + 24,
                 autoscaler_metrics=base + 25, dashboard_metrics=base + 26)


def _started(proc, log_path, deadline) -> bool:
    while time.time() < deadline:
        with open(log_path, errors="replace") as log:
            if "Ray runtime started" in log.read():
                return True
        if proc.poll() is not None:
            return False
        time.sleep(0.5)
    return False


def _start(argv, env, log_path, cwd):
    """``ray start ... --block`` in its own process group. Retried: on a busy machine Ray's
    fixed startup windows (15 s for the dashboard agent, 30 s for the raylet) can pass."""
    for attempt in (1, 2, 3):
        proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=open(log_path, "w"),
                                stderr=subprocess.STDOUT, cwd=cwd)
        if _started(proc, log_path, time.time() + 120):
            return proc
        _stop_group(proc)
    crashes = []
    for raylet_log in glob.glob(os.path.join(cwd, "ray", "session_latest", "logs", "raylet*.out")):
        with open(raylet_log, errors="replace") as log:
            crashes += [line[:300] for line in log if " C " in line]
    with open(log_path, errors="replace") as log:
        pytest.fail(f"{os.path.basename(log_path)}: ray start did not come up in 3 tries (a busy machine?)\n"
                    + "\n".join(crashes) + "\n" + log.read()[-1500:])


def _stop_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=1)  # `ray start --block` stops its children on SIGTERM, slowly (over 5 s)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _ours(tag):
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(tag in arg for arg in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def _listening(procs):
    ports = {}
    for proc in procs:
        try:
            for conn in proc.net_connections("inet"):
                if conn.status == psutil.CONN_LISTEN:
                    ports.setdefault(conn.laddr.port, set()).add(conn.laddr.ip)
        except psutil.Error:
            pass
    return ports


CLIENT = """
import json, sys, ray
from hetlab import cluster
cluster.connect(sys.argv[1], timeout=20)

@ray.remote(num_cpus=0)
class Where:
    def node(self):
        return ray.get_runtime_context().get_node_id()

mac = Where.options(**cluster.placement("mac")).remote()
rows = cluster.nodes()
print(json.dumps({"roles": sorted(r["role"] for r in rows), "mac_actor_on": ray.get(mac.node.remote(), timeout=60),
                  "ids": {r["role"]: r["node_id"] for r in rows}}))
"""


@pytest.fixture(scope="module")
def real_pair():
    tag = tempfile.mkdtemp(prefix="hl", dir="/tmp")  # short: Ray's socket paths live under it
    home = os.path.join(tag, "home")
    os.makedirs(os.path.join(home, ".ray"))
    token = os.path.join(home, ".ray", "auth_token")
    with open(os.open(token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(secrets.token_hex(32))  # what `ray get-auth-token --generate` writes
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_AUTH", "RAY_ADDRESS", "HETLAB_ADDRESS"))}
    env.update(HOME=home, PATH=f"{BIN}:{env.get('PATH', '')}", PYTHONPATH=ROOT, RAY_USAGE_STATS_ENABLED="0")
    base = _free_block(60)
    head_ports, mac_ports = _ports(base), _ports(base + 30)
    # the (argv, environment) pairs that the printed lines show and `hetlab head/join --start` run
    # here in the foreground, in a private temp dir; the Mac's node joins the head's GCS port
    foreground = ["--block", f"--temp-dir={tag}/ray"]
    head, head_env = commands.head_start("127.0.0.1", head_ports, cpus=1)
    mac, mac_env = commands.join_start("127.0.0.1", "127.0.0.1", replace(mac_ports, gcs=head_ports.gcs), cpus=1)
    head, mac = (head + foreground, head_env), (mac + foreground, mac_env)
    procs = []
    try:
        for (argv, extra), name in [(head, "head"), (mac, "mac")]:
            procs.append(_start(argv, {**env, **extra}, os.path.join(tag, f"{name}.log"), tag))
        yield dict(tag=tag, env=env, head=head_ports, mac=mac_ports, token=token)
    finally:
        for proc in reversed(procs):
            _stop_group(proc)
        leftovers = _ours(tag)
        for proc in leftovers:  # only processes whose command line names our private temp dir
            proc.kill()
        psutil.wait_procs(leftovers, timeout=10)
        assert not _ours(tag), "processes of the test cluster survived"
        shutil.rmtree(tag, ignore_errors=True)


def _client(env, code_or_args, address, timeout=90):
    args = ["-c", code_or_args, address] if isinstance(code_or_args, str) else code_or_args
    return subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


ON_THE_REHEARSAL = pytest.mark.skipif(
    rehearsal.missing() is None, reason="checked across two hosts in tests/test_rehearsal.py (doctor, tokens, "
                                        "listening ports; the printed lines start its Ray)")


@ON_THE_REHEARSAL
def test_printed_commands_make_an_authenticated_two_node_cluster(real_pair):
    env, address = real_pair["env"], f"127.0.0.1:{real_pair['head'].gcs}"
    no_token_home = os.path.join(real_pair["tag"], "stranger")
    os.makedirs(no_token_home)
    runs = {  # all at once: each is a fresh Python that imports Ray
        "good": _client({**env, "RAY_AUTH_MODE": "token"}, CLIENT, address),
        "doctor": _client({**env, "RAY_AUTH_MODE": "token"},
                          ["-m", "hetlab", "doctor", "--head", address], address),
        "no_token": _client({**env, "HOME": no_token_home}, CLIENT, address),
        "wrong_token": _client({**env, "HOME": no_token_home, "RAY_AUTH_MODE": "token",
                                "RAY_AUTH_TOKEN": secrets.token_hex(32)}, CLIENT, address),
    }
    out = {name: (proc.communicate(timeout=120), proc.returncode) for name, proc in runs.items()}
    (stdout, stderr), rc = out["good"]
    assert rc == 0, stderr[-2000:]
    seen = json.loads(stdout.strip().splitlines()[-1])
    assert seen["roles"] == ["desktop", "mac"]
    assert seen["mac_actor_on"] == seen["ids"]["mac"]
    (stdout, stderr), rc = out["doctor"]
    assert rc == 0, stdout + stderr[-2000:]
    assert "2 node(s): desktop, mac" in stdout and "[  ok] Ray version" in stdout
    assert "[  ok] torch version" in stdout
    assert "ports of mac" in stdout and "FAIL" not in stdout
    for name in ("no_token", "wrong_token"):
        (stdout, stderr), rc = out[name]
        assert rc != 0
        last = stderr.strip().splitlines()[-1]
        assert last.startswith("hetlab.errors.HetlabError:") and "token" in last, stderr[-2000:]   # the last line: what to do


@ON_THE_REHEARSAL
def test_only_listed_ports_listen_and_dashboard_is_local(real_pair):
    head, mac = real_pair["head"], real_pair["mac"]
    listening = _listening(_ours(real_pair["tag"]))
    allowed = set(head.listening(head=True)) | set(head.local_only(head=True)) | set(mac.listening(head=False))
    assert set(listening) <= allowed, sorted(set(listening) - allowed)
    assert head.gcs in listening and mac.node_manager in listening
    assert listening[head.dashboard] == {"127.0.0.1"}
