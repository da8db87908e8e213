"""PracticeCluster + placement on a real two-node Ray (ray.cluster_utils.Cluster) on this box."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import ray

import hetlab
from hetlab import HetlabError, environment
from hetlab import cluster
from hetlab.core import machine
from hetlab.tools import doctor
from hetlab.cluster.roles import node_name, placement, role_label
from hetlab.cluster.practice import PracticeCluster, display_name
from hetlab.ps import WorkerSpec
from hetlab.ps.specs import actor_options
from hetlab.ps.records import cluster_samples_per_s


@ray.remote(num_cpus=0)
class WhereAmI:
    def node(self):
        return ray.get_runtime_context().get_node_id()


@pytest.fixture(scope="module")
def practice(tmp_path_factory):
    # As in test_cluster: a 0644 copy of this user's token (private temp folder) named by
    # RAY_AUTH_TOKEN_PATH shows the practice cluster securing the file Ray reads.
    default = Path.home() / ".ray" / "auth_token"
    with pytest.MonkeyPatch.context() as env:
        tokens = [default]
        if default.is_file():
            tokens.insert(0, tmp_path_factory.mktemp("token") / "auth_token")
            tokens[0].write_text(default.read_text())
            tokens[0].chmod(0o644)
            env.setenv("RAY_AUTH_TOKEN_PATH", str(tokens[0]))
        with PracticeCluster(roles=("desktop", "mac")) as pc:
            pc.token_files = tokens
            yield pc


def test_each_role_is_its_own_node(practice):
    assert len({practice.node_id("desktop"), practice.node_id("mac")}) == 2
    alive = [n for n in ray.nodes() if n["Alive"]]
    assert len(alive) == 2
    by_id = {n["NodeID"]: n for n in alive}
    mac = by_id[practice.node_id("mac")]
    assert mac["Labels"]["hetlab-role"] == "mac"
    assert mac["Resources"].get("GPU", 0) == 0  # no GPU here: the simulated Mac claims none
    assert node_name(mac["Labels"], "?") == display_name("mac")  # Linux: "mac (simulated)"
    assert [display_name(r).endswith(" (simulated)") for r in ("desktop", "mac")].count(True) == 1
    for token in practice.token_files:  # the token files Ray uses here are private
        assert token.stat().st_mode & 0o777 == 0o600, token


def test_the_heads_gcs_waits_for_a_busy_node(practice):
    """The practice nodes share this machine's cores: the GCS that watches them runs with
    PATIENT_HEALTH_CHECK (read back from its own command line), so a node starved of CPU for a
    minute is not marked dead. A busy run once lost its "mac" to Ray's default (5 checks of 10 s)."""
    import base64
    import json
    from hetlab.cluster.practice import PATIENT_HEALTH_CHECK
    head = practice._local_cluster.head_node
    [gcs] = [infos[0].process.pid for name, infos in head.all_processes.items() if "gcs" in name]
    with open(f"/proc/{gcs}/cmdline") as f:
        [config] = [a.split("=", 1)[1] for a in f.read().split("\0") if a.startswith("--config_list=")]
    told = json.loads(base64.b64decode(config))
    assert {k: told.get(k) for k in PATIENT_HEALTH_CHECK} == PATIENT_HEALTH_CHECK
    assert PATIENT_HEALTH_CHECK["health_check_timeout_ms"] > 10_000  # Ray's default: 10 s


def test_placement_pins_actor_to_role(practice):
    mac = WhereAmI.options(**placement("mac")).remote()
    desk = WhereAmI.options(**placement("desktop")).remote()
    assert ray.get(mac.node.remote(), timeout=60) == practice.node_id("mac")
    assert ray.get(desk.node.remote(), timeout=60) == practice.node_id("desktop")
    for actor in (mac, desk):
        ray.kill(actor)


def test_the_macs_figures_travel_through_the_cluster(practice, tmp_path):
    """The desktop reads the mac's saved figures on the mac's own node; with none there, it has
    them measured there first. ``there`` stands for the mac's folder, ``where`` for the desktop's."""
    from hetlab.store import measured
    from hetlab.cluster import figures
    mac_side, desktop_side = tmp_path / "mac", tmp_path / "desktop"
    first = figures.fetch("mac", desktop_side, there=str(mac_side), quick=True)
    assert first.measured_now and first.node_id == practice.node_id("mac")
    assert measured.load("mac", mac_side) == first.data          # saved on the mac's side too
    again = figures.fetch("mac", desktop_side, there=str(mac_side))
    assert not again.measured_now and again.node_id == practice.node_id("mac")
    assert measured.load("mac", desktop_side) == measured.load("mac", mac_side)
    assert measured.step_time("mac", "small", desktop_side).source.startswith("measured on")


def test_the_report_after_the_course_on_the_practice_cluster_has_every_section(practice, tmp_path):
    """`hetlab report` after what notebooks 01–08 save in quick mode on the practice cluster, made here by
    the calls those notebooks make, cheaply: both sweeps fetched through the cluster (with their steady
    speed at the course's batch), the machines described on their nodes, the link measured through Ray,
    the parameter server sync, async and local SGD, the tuned split, each prediction. Every section is
    there, every speed has its spread, every figure its label ("simulated" where practice), no host
    name, address or token; a learner's words survive a rewrite with new figures. (09's search and 07's Ray Train cost minutes: their rows
    say "not yet measured", and tests/test_report.py checks 09's section from saved figures.)"""
    import platform
    import re
    from hetlab.arithmetic import balance, steptime
    from hetlab.store import measured
    from hetlab.arithmetic.outcome import technique
    from hetlab.cluster import figures
    from hetlab.ps import ParameterServerTraining
    from hetlab.ps.records import engine_cost, exchange_costs
    from hetlab.core.data import load_mnist
    from hetlab.tools.cli import main
    from hetlab.views import report
    where = tmp_path / "measured"
    for role in ("desktop", "mac"):                                                    # 02 (and 04's fetch)
        figures.fetch(role, where, there=str(tmp_path / role), quick=True)
    lines = [measured.step_time(role, "small", where) for role in ("desktop", "mac")]
    measured.save_run("02", {"batch": 128}, simulated=False, where=where, predictions={
        "the pair's ceiling": (steptime.ceiling(*lines, 128), None, "steptime.ceiling at batch 128",
                               measured.whose(desktop=lines[0].source, mac=lines[1].source))})
    figures.describe_machines(where=where)                                         # 09's machine table
    measured.save_graded("samples_per_s", "02", "right", "right: agrees", role="mac", where=tmp_path / "mac")   # 02's grader
    assert figures.fetch_graded("mac", where, there=str(tmp_path / "mac")) == 1       # on the mac, over Ray
    figures.measure_link(sizes_mb=(1, 4), repeats=2, echoes=5, where=where)               # 08's link exercise
    train, test = load_mnist("train").subset(2000, seed=0), load_mnist("test").subset(300, seed=0)
    workers = [WorkerSpec("desktop", role="desktop", device="cpu"),
               WorkerSpec("mac", role="mac", device="cpu", slowdown=4)]
    with ParameterServerTraining(workers, train, seed=0, progress=False, batch_sizes=[32, 32]) as run:
        alone = run.standalone_samples_per_s(64, steps=3)
        rates = {}
        for name, sizes in (("equal", [32, 32]), ("tuned", balance.split_batch(64, alone))):
            records, checked = run.run_checked(6, test, 3, batch_sizes=sizes)    # 05's time to target
            rates[name] = (sizes, cluster_samples_per_s(records))
        sync = technique(records, run.evaluate(test), checked=checked)
    engine = engine_cost(records)
    measured.save_engine(engine, simulated=True, where=where)
    measured.save_run("05", {"engine_s": engine, "link_s": max(exchange_costs(records).values()) - engine},
                      simulated=True, where=where)
    with ParameterServerTraining(workers, train, mode="async", max_staleness=2, seed=0, progress=False,
                                 batch_sizes=[32, 32]) as run:
        run.run(2)
        measured.save_run("05", {}, simulated=True, add=True, where=where,
                          speeds={"sync": sync, "async": technique(run.run(8), run.evaluate(test))})
    with ParameterServerTraining(workers, train, mode="local_sgd", local_steps=2, seed=0, progress=False,
                                 batch_sizes=[32, 32]) as run:
        local = technique(run.run(4), run.evaluate(test))
    measured.save_run("08", {"sync_bytes_per_sample": 1.0, "local_bytes_per_sample": 0.25}, simulated=True,
                      where=where, speeds={"sync": sync, "local SGD": local}, predictions={
                          "local SGD ÷ sync": (1.1, local["speed"]["samples_per_s"] / sync["speed"]["samples_per_s"],
                                               "planner.at_split", "the practice cluster's")})
    tuned, eff = rates["tuned"][0], balance.efficiency(rates["tuned"][1], alone)
    measured.save_run("06", {"tuned_split": tuned, "efficiency_tuned": eff, "speed_ratio": alone[0] / alone[1],
                             "ratio_share": alone[1] / sum(alone),
                             "efficiency_equal": balance.efficiency(rates["equal"][1], alone)}, simulated=True,
                      predictions={"efficiency of the tuned split": (
                          steptime.predicted_efficiency([steptime.constant_speed(a) for a in alone], tuned), eff,
                          "steptime.predicted_efficiency")}, where=where)
    assert "practice" in measured.engine_cost(where).source
    out = where / "report"
    assert main(["report", "--measured", str(where)]) == 0
    page = (out / "report.md").read_text()
    for n, section in enumerate(report.SECTIONS, 1):                                   # every section
        assert f"## {n} · {section}" in page, section
    speeds = [line for line in page.splitlines() if "samples/s" in line and re.search(r"\d,?\d* samples/s", line)]
    assert speeds and all(re.search(r"range [\d,]+–[\d,]+ over \d+ windows; warm-up", line) for line in speeds)
    rows = [line for line in page.splitlines() if line.startswith("| ") and " | simulated" not in line
            and ("parameter server" in line or "(08)" in line)]
    assert len(rows) == 4 and all("windows" in r and "measured on" in r and "simulated" in r for r in rows), rows
    assert "| mac (simulated" not in page and "| where | your pair | simulated" in page   # the machine table
    assert re.search(r"bandwidth, desktop → mac: [\d,]+ Mbit/s \(range", page)
    assert "| 02 | the pair's ceiling | " in page and "the practice cluster's" in page
    assert "| 02 | `samples_per_s` | mac | right: right: agrees |" in page             # the Mac's exercise
    shown = [page, (out / "report.html").read_text()]
    for text in shown:                     # the host's name and the cluster's address, as whole words
        assert not re.search(rf"(?<![\w.-]){re.escape(platform.node())}(?![\w-])", text)
        assert practice.address.split(":")[0] not in text and not re.search(r"\b\d{1,3}(\.\d{1,3}){3}\b", text)
    assert "measured on this machine" in page
    for token_file in practice.token_files:
        if token_file.is_file():
            assert all(token_file.read_text().strip() not in text for text in shown)
    asked = report.unwritten(page)                                                # all unwritten at first,
    assert set(report.QUESTIONS) <= set(asked) and any(k.startswith("why-") for k in asked)   # own figures' too
    assert all("batch 64, split" in r and "QUICK mode" in r for r in rows)              # each row's conditions
    assert all("checked every 3 steps on 300 test samples" in r for r in rows if "per-step sync" in r)
    mine = "The mac waited less than I thought: its messages, not its compute, set the step."
    (out / "report.md").write_text(page.replace(report.UNWRITTEN, mine, 1))
    figures.measure_link(sizes_mb=(1,), repeats=2, echoes=3, where=where)               # new figures, then again
    again = report.write(out, where).read_text()
    assert mine in again and len(report.unwritten(again)) == len(asked) - 1
    assert "over 2 objects of 1 MB" in again and "over 2 objects of 4 MB" in page
    assert main(["report", "--measured", str(tmp_path / "nothing")]) == 2      # nothing measured: one line


def test_label_selector_pins_actor_to_role(practice):
    # Ray Train pins ranks with the same labels; actors accept label_selector in 2.60 too.
    actor = WhereAmI.options(label_selector=role_label("mac")).remote()
    assert ray.get(actor.node.remote(), timeout=60) == practice.node_id("mac")
    ray.kill(actor)


def test_node_table_says_simulated_and_versions_compare(practice):
    rows = cluster.node_table()
    assert [r["name"] for r in rows] == [display_name("desktop"), display_name("mac")]  # head first
    simulated = next(r["name"] for r in rows if r["name"].endswith(" (simulated)"))  # Linux: the mac
    assert simulated in str(rows)
    mac = next(r for r in rows if r["role"] == "mac")
    assert all(c.status == doctor.OK for c in doctor.compare_versions(machine.facts(), mac))
    altered = {**mac, "ray": "2.59.0", "python": mac["python"].rsplit(".", 1)[0] + ".99"}
    checks = {c.name: c for c in doctor.compare_versions(mac, altered)}
    assert checks["Ray version"].status == doctor.FAIL and "ray[default,train]==2.59.0" in checks["Ray version"].fix
    assert checks["Python version"].status == doctor.FAIL
    relaxed = {c.name: c for c in doctor.compare_versions(mac, altered, python_match="minor")}
    assert relaxed["Python version"].status == doctor.WARN


def test_connect_by_address_and_reconnect(practice, monkeypatch):
    for _ in range(2):  # a re-run notebook cell: the second call replaces the first connection
        cluster.connect(practice.address, timeout=30)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    monkeypatch.setenv("HETLAB_ADDRESS", practice.address)
    cluster.connect()  # the address from the environment, not a new local Ray
    assert {n["NodeID"] for n in ray.nodes() if n["Alive"]} == {practice.node_id(r) for r in practice.roles}


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare (a process that sees no Ray node on its machine)")
def test_a_driver_on_a_machine_without_a_node_is_told_in_one_line(practice):
    """A notebook on a machine of the LAN that runs no Ray node (the Mac before its `ray start`):
    ray.init looks for a local node for 60 s, then fails, and hetlab's 15 s deadline blamed the
    port or the token. In a PID namespace of its own the driver sees no Ray process, as on such a
    machine (Ray finds a local node by its processes), and reaches the head as before."""
    code = f"from hetlab import cluster; cluster.connect({practice.address!r}, timeout=30)"
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAY_AUTH_MODE": "token"})
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0, done.stderr   # the reason below, not a deadline's guess at port or token
    assert last.startswith("hetlab.errors.HetlabError: no Ray node runs on this machine") and \
        "`hetlab join`" in last, last


def test_doctor_against_the_practice_head(practice):
    checks = doctor.head_checks(practice.address)  # connects, then disconnects
    assert all(c.ok for c in checks), doctor.render(checks)
    names = [c.name for c in checks]
    assert f"ports of {display_name('mac')}" in names and {"Ray version", "torch version"} <= set(names)
    cluster.connect(practice.address, timeout=30)


def test_bad_placement_is_one_line_error(practice):
    with pytest.raises(HetlabError, match="unknown role 'laptop'"):
        placement("laptop")
    with pytest.raises(HetlabError, match="no GPU"):
        placement("desktop", gpu=True)
    with pytest.raises(HetlabError, match="unknown role"):
        PracticeCluster(roles=("desktop", "tablet"))


def test_a_gpu_worker_without_a_role_is_refused_on_several_nodes(practice):
    """Ray 2.60 reports an Apple Silicon Mac's GPU as ``GPU: 1`` too, so on the real pair a
    ``device="cuda"`` worker with no role could start on the Mac (an ``"mps"`` one on the
    desktop): ``ParameterServerTraining`` asks ``actor_options`` before any actor starts, and
    it refuses in one line."""
    for device, role in (("cuda", "desktop"), ("mps", "mac")):
        with pytest.raises(HetlabError, match=rf"worker 'a' asks for device='{device}' but has no role: "
                                              rf".*give it role='{role}'\.$"):
            actor_options(WorkerSpec("a", device=device))
    assert actor_options(WorkerSpec("a", device="cpu")) == {}  # a CPU worker may go anywhere


def test_losing_and_regaining_the_mac(practice):
    actor = WhereAmI.options(**placement("mac")).remote()
    assert ray.get(actor.node.remote(), timeout=60) == practice.node_id("mac")
    practice.remove_node("mac")
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.node.remote(), timeout=60)
    with pytest.raises(HetlabError, match="no live node has role 'mac'"):
        placement("mac")
    with pytest.raises(HetlabError, match="is the head"):
        practice.remove_node("desktop")
    new_id = practice.add_node("mac")
    again = WhereAmI.options(**placement("mac")).remote()
    assert ray.get(again.node.remote(), timeout=60) == new_id


def test_a_mac_on_another_commit_is_refused_at_connect(practice, tmp_path):
    """A Mac left on an older commit after files moved failed deep in a worker (ModuleNotFoundError):
    connect asks every node which hetlab it runs and refuses another one in one line that says
    which machine to update. FAKE: the mac's node starts with GIT_DIR naming another repository
    (one empty commit), so git reads another commit there; on the pair it is the Mac's checkout."""
    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    subprocess.run(["git", "-C", str(other), "-c", "user.name=fake", "-c", "user.email=fake@example.org",
                    "commit", "-q", "--allow-empty", "-m", "fake"], check=True)
    fake = subprocess.run(["git", "-C", str(other), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    mac = display_name("mac")
    practice.remove_node("mac")
    try:
        with environment({"GIT_DIR": str(other / ".git")}):  # the mac node's processes inherit it
            practice.add_node("mac")
        with pytest.raises(HetlabError) as refused:
            cluster.connect(practice.address, timeout=30)
        assert str(refused.value) == (
            f"the {mac} runs hetlab {hetlab.__version__} at {fake}, the {display_name('desktop')} at "
            f"{machine.hetlab_commit()}: on the {mac} run `git pull` in hetlab's folder (to match the "
            f"{display_name('desktop')}: `git checkout {machine.hetlab_commit()}`), then connect again.")
        assert not ray.is_initialized()   # refused: not left connected
    finally:
        practice.remove_node("mac")
        practice.add_node("mac")
    cluster.connect(practice.address, timeout=30)   # one code on both again: connected


def test_shutdown_on_error_is_clean_and_idempotent(practice):
    nodes = list(practice._nodes.values())
    with pytest.raises(RuntimeError, match="a failing cell"):
        with practice:
            raise RuntimeError("a failing cell")
    assert not ray.is_initialized()
    assert not any(node.any_processes_alive() for node in nodes)
    practice.shutdown()  # second call: no error
    with pytest.raises(HetlabError, match="shut down"):
        practice.add_node("mac")
