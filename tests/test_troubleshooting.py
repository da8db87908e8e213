"""docs/troubleshooting.md stays honest: every one-line error hetlab (and the maintainers' harness)
can show is on the page, and every teardown command undoes something hetlab prints or is a hetlab
(or harness) command.

Messages are read from the library's source with ``ast`` (nothing is imported but the printed
instructions and the CLI parser): the first argument of every ``HetlabError(...)``, the strings
returned by the functions that explain a failure in one line, the doctor's checks that can
warn or fail, and the token notice. Each message is rendered with ``…`` for its variable parts
and its first ``PREFIX`` characters must appear on the page.
"""
from __future__ import annotations

import ast
import functools
import re
import shlex
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "troubleshooting.md"
PREFIX = 60  # characters of each message that must be quoted on the page

# functions whose returned strings are one-line explanations shown to the learner
EXPLAINERS = {
    "cluster/connecting.py": ("port_open", "probe_gcs"),
    "cluster/joining.py": ("why_no_mac",),
    "raytrain/mixed.py": ("explain_failure",),
    "harness/rehearsal/hosts.py": ("missing",),
    "views/widgets.py": ("shut_down_note",),
}
NOTICES = {"cluster/raylog.py": ("NOTICE",)}  # module-level one-line notices


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"``: an f-string naming one shows its text, not ``…``."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def render(node: ast.AST, constants: dict[str, str]) -> str | None:
    """A message as the learner reads it: literal text, ``…`` for each variable part."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(value.value)
            elif isinstance(value.value, ast.Name) and value.value.id in constants \
                    and value.conversion == -1 and value.format_spec is None:
                parts.append(constants[value.value.id])
            else:
                parts.append("…")
        return "".join(parts)
    return None


def normalize(text: str) -> str:
    """One line, single spaces, and any run of variable parts (``… …``, ``……``) as one ``…``."""
    return re.sub(r"…(?:\s*…)+", "…", " ".join(text.split()))


def prefix(message: str) -> str:
    text = normalize(message)
    if len(text) <= PREFIX:
        return text
    cut = text[:PREFIX]
    return cut[:cut.rfind(" ")] if " " in cut else cut


@functools.lru_cache(maxsize=None)  # parsed once per test session
def library_messages(root: Path = ROOT) -> dict[str, str]:
    """{where: message} for every one-line error or notice in ``hetlab/`` and ``harness/`` (where: the
    module's path under ``hetlab/``, or from the root for the harness, and a line)."""
    found = {}
    package = root / "hetlab"
    vocab = _constants(ast.parse((package / "vocab.py").read_text(encoding="utf-8")))
    for path in sorted(package.rglob("*.py")) + sorted((root / "harness").rglob("*.py")):
        where = path.relative_to(package if path.is_relative_to(package) else root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {**vocab, **_constants(tree)}  # vocab's names (env variables) read as their text
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "HetlabError" and node.args:
                text = render(node.args[0], constants)
                if text is not None:
                    found[f"{where}:{node.lineno}"] = text
            if isinstance(node, ast.FunctionDef) and node.name in EXPLAINERS.get(where, ()):
                for ret in ast.walk(node):
                    if isinstance(ret, ast.Return) and ret.value is not None:
                        text = render(ret.value, constants)
                        if text is not None:
                            found[f"{where}:{ret.lineno} ({node.name})"] = text
        for name in NOTICES.get(where, ()):
            found[f"{where}:{name}"] = constants[name]
    return found


DOCTOR = ("doctor.py",)  # the module whose Checks `hetlab doctor` prints


def doctor_checks(root: Path = ROOT) -> dict[str, str]:
    """{where: check name} for every doctor Check that can warn or fail (status not plain OK)."""
    found = {}
    for module in DOCTOR:
        tree = ast.parse((root / "hetlab" / "tools" / module).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Check" and len(node.args) >= 2:
                status = node.args[1]
                if isinstance(status, ast.Name) and status.id == "OK":
                    continue
                name = render(node.args[0], {})
                if name is not None:
                    found[f"{module}:{node.lineno}"] = name
    return found


def missing_from(page: str, messages: dict[str, str]) -> list[str]:
    text = normalize(page)
    return [f"{where}: {prefix(message)!r}" for where, message in messages.items()
            if prefix(message) not in text]


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_every_library_message_is_on_the_page(page):
    messages = library_messages()
    assert len(messages) > 100  # the extraction itself still finds the library's messages
    assert missing_from(page, messages) == []


def test_every_doctor_check_that_can_fail_is_on_the_page(page):
    checks = doctor_checks()
    assert {"Ray version", "head GCS port", "token file", "ports of …", "WSL networking",
            "Mac sleep"} <= set(checks.values())
    text = normalize(page)
    assert [f"{where}: {name}" for where, name in checks.items() if f"] {name}:" not in text] == []


def test_the_check_fails_when_a_message_is_missing(page):
    messages = library_messages()
    where, message = next((w, m) for w, m in messages.items() if w.startswith("core/checkpoint.py"))
    without = normalize(page).replace(prefix(message), "")
    assert missing_from(without, messages) == [f"{where}: {prefix(message)!r}"]
    assert missing_from(page, {"new.py:1": "a message nobody has written down yet"}) != []


def test_rendering_marks_variable_parts_and_keeps_named_constants():
    tree = ast.parse('ENV = "RAY_X"\nf"{ENV}={level!r}: use {a} {b} or {c}{d}."')
    expr = tree.body[1].value
    assert render(expr, _constants(tree)) == "RAY_X=…: use … … or ……."
    assert normalize("use … … or …….") == "use … or …."


# --- teardown: every command undoes a printed one, or is a hetlab / ray command that exists ---

def _section(page: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", page, flags=re.M | re.S)
    assert match, f"no '## {title}' section"
    return match.group(1)


def teardown_commands(page: str, languages: tuple[str, ...] = ("bash", "sh", "")) -> list[str]:
    """Non-comment lines of the fenced blocks in those languages in the page's Teardown section."""
    blocks = re.findall(r"```(\w*)\n(.*?)```", _section(page, "Teardown"), flags=re.S)
    return [line.strip() for language, block in blocks if language in languages
            for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]


READ_ONLY = {"sudo ufw status numbered",  # list what is left, change nothing
             "sudo /usr/libexec/ApplicationFirewall/socketfilterfw --listapps"}


def _printed() -> tuple[str, str]:
    from hetlab.cluster import commands
    return (commands.render_head("192.168.1.10"),
            commands.render_join("192.168.1.10", "192.168.1.20"))


def check_teardown_line(line: str) -> str | None:
    """None if ``line`` is a command the teardown may name, else why not."""
    from hetlab.cluster import commands
    from hetlab.tools.cli import build_parser
    head, join = _printed()
    printed = head + "\n" + join
    try:
        argv = shlex.split(line)
    except ValueError:
        argv = []
    if argv[:1] == ["sudo"]:
        argv = argv[1:]
    if argv[:1] == ["$(command -v hetlab)"]:  # hetlab from whichever environment holds it
        argv = ["hetlab", *argv[1:]]
    if argv[:3] == ["$(command -v python)", "-m", "harness.rehearsal"]:   # the maintainers' rehearsal
        from harness.rehearsal.__main__ import build_parser as harness_parser
        try:
            harness_parser().parse_args(argv[3:])
        except SystemExit:
            return "not a harness.rehearsal command line it accepts"
        return None
    if argv and Path(argv[0]).name == "hetlab":
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit:
            return "not a hetlab command line the CLI accepts"
        return None
    if line == "ray stop":
        return None if "ray stop" in head else "the printed head steps no longer say `ray stop`"
    if line in READ_ONLY:
        return None
    if "ufw delete allow" in line:  # a printed ufw rule, with `delete`
        added = "sudo " + line.split("sudo ", 1)[-1].replace("ufw delete allow", "ufw allow")
        rules = {l.split(" #")[0].strip() for l in commands.pasted(printed) if l.startswith("sudo ufw allow proto")}
        return None if added in rules else "not a printed ufw rule with `delete`"
    if commands.MACOS_FIREWALL in line:  # the printed socketfilterfw loop, --remove instead of --add
        loop = next((l for l in commands.pasted(join) if commands.MACOS_FIREWALL in l), "")
        same_apps = line.split("| while")[0] == loop.split("| while")[0]
        undoes = f'sudo {commands.MACOS_FIREWALL} --remove "$app"' in line
        return None if same_apps and undoes else "not the printed socketfilterfw loop with --remove"
    if commands.TOKEN_PATH in line:  # the token file the printed steps write
        generate = "ray get-auth-token --generate >/dev/null && chmod 600 " + commands.TOKEN_PATH
        if "get-auth-token" in line and generate not in head:
            return "the printed head steps no longer generate the token this way"
        if "get-auth-token" in line and not line.endswith(generate):
            return "a new token must be made as the printed head steps make it"
        return None
    return "unknown command: undo something `hetlab head`/`hetlab join` print, or add it here"


def test_every_teardown_command_matches_the_printed_steps_or_the_cli(page):
    lines = teardown_commands(page)
    assert any("ray stop" == l for l in lines) and any("harness.rehearsal down" in l for l in lines)
    assert {line: check_teardown_line(line) for line in lines} == {line: None for line in lines}


def test_teardown_check_refuses_a_command_nobody_printed():
    assert check_teardown_line("sudo ufw delete allow proto tcp from MAC_IP to any port 22") is not None
    assert check_teardown_line("sudo ufw delete allow proto tcp from MAC_IP to any port 6379:6386") is not None
    assert check_teardown_line("hetlab rehearse explode") is not None
    assert check_teardown_line('sudo "$(command -v python)" -m harness.rehearsal explode') is not None
    assert check_teardown_line("rm -rf ~/.ray") is not None


def check_windows_teardown_line(line: str) -> str | None:
    """None if a PowerShell teardown ``line`` undoes what `hetlab head` prints inside WSL, else why not."""
    from hetlab.windows import wsl
    printed = wsl.render_head("192.168.1.10", "192.168.1.20")
    removed = re.fullmatch(r"Remove-(NetFirewallHyperVRule|NetFirewallRule) -DisplayName '([^']+)'"
                           r" -ErrorAction SilentlyContinue", line)
    if removed:
        added = f"New-{removed.group(1)} -DisplayName '{removed.group(2)}'"
        return None if added in printed else "removes a rule nobody printed"
    if line == "wsl --shutdown":
        return None if line in printed else "the printed steps no longer use it"
    return "unknown PowerShell command: undo something `hetlab head` prints inside WSL, or add it here"


def test_windows_teardown_undoes_exactly_the_printed_windows_steps(page):
    from hetlab.windows import wsl
    lines = teardown_commands(page, ("powershell",))
    assert {line: check_windows_teardown_line(line) for line in lines} == {line: None for line in lines}
    for name in (wsl.RULE, wsl.TRAIN_RULE):  # each printed rule has its removal, in both firewalls
        assert {f"Remove-NetFirewallHyperVRule -DisplayName '{name}' -ErrorAction SilentlyContinue",
                f"Remove-NetFirewallRule -DisplayName '{name}' -ErrorAction SilentlyContinue"} <= set(lines)
    assert lines[-1] == "wsl --shutdown"   # last: it closes every Ubuntu window
    assert check_windows_teardown_line("Remove-NetFirewallRule -DisplayName 'Remote Desktop' "
                                       "-ErrorAction SilentlyContinue") is not None
    assert check_windows_teardown_line("Set-NetFirewallProfile -Enabled False") is not None


SHELL_BLOCKS = re.findall(r"```(?:bash|sh)\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.skipif(not (shutil.which("zsh") and shutil.which("bash")), reason="needs zsh and bash (.ci/run installs zsh)")
@pytest.mark.parametrize("code", SHELL_BLOCKS, ids=[f"block{i}" for i in range(len(SHELL_BLOCKS))])
def test_every_shell_block_runs_when_pasted_whole(code, tmp_path):
    """Each block is for one machine and is pasted whole, as a terminal pastes (a pseudo-terminal,
    bracketed paste): into zsh -f -i (the Mac's shell, where a # note would run as a command) and
    bash -i. Its programs are labelled recording stand-ins; each is called once, in order."""
    from harness.rehearsal import learner
    for role in ("mac", "desktop"):
        ran = learner.paste_with_standins({"code": code}, role, tmp_path / role)
        assert ran == learner.standins_for(learner.fill_in(code, learner.EXAMPLES)), (role, ran)


def doctor_commands() -> list[str]:
    """The commands the doctor's fix lines give in backticks (hetlab.tools.doctor's string constants and
    f-strings, each {value} an example address): those a learner pastes at a prompt."""
    programs = ("hetlab ", "ray ", "sudo ", "wsl ", "powercfg ", "pmset ", "conda ", "ufw ", "make ")
    found = []
    for path in [ROOT / "hetlab" / "tools" / "doctor.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "192.168.1.10" for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            found += [span for span in re.findall(r"`([^`\n]+)`", text) if span.startswith(programs)]
    return sorted(set(found))


@pytest.mark.skipif(not (shutil.which("zsh") and shutil.which("bash")), reason="needs zsh and bash (.ci/run installs zsh)")
def test_the_doctors_fix_lines_run_when_pasted(tmp_path):
    """Every command a doctor fix line gives, pasted at once (one a line) into zsh -f -i and bash -i on a
    pty with bracketed paste, its programs recording stand-ins: no # note, each program called in order."""
    from harness.rehearsal import learner
    commands = doctor_commands()
    assert len(commands) > 5 and not any("#" in c for c in commands), commands
    code = learner.fill_in("\n".join(commands), {"HEAD_IP": "192.168.1.10", **learner.EXAMPLES})
    for role in ("mac", "desktop"):
        ran = learner.paste_with_standins({"code": code}, role, tmp_path / role)
        assert ran == learner.standins_for(code) != [], (role, ran)
