"""The doctor's look at the Windows side, from inside WSL (``hetlab doctor``, notebook 04; README, "Windows desktop").

Through WSL's interop the doctor runs Windows' own programs: ``cmd.exe /c ver`` (the build: mirrored
networking needs 22621+), ``powershell.exe`` (the hetlab firewall rules as Windows holds them),
``powercfg /query SCHEME_CURRENT SUB_SLEEP`` (sleep and hibernate on AC), and NVIDIA's Windows driver's ``nvidia-smi`` in
/usr/lib/wsl/lib. Each parser is a pure function of that text, so the tests supply what a
Windows machine prints.
"""
from __future__ import annotations

import json

from hetlab.cluster import commands
from hetlab.windows import steps, wsl, wslconfig
from hetlab.tools.doctor.checks import FAIL, OK, WARN, Check

RESTART = "then `wsl --shutdown` in PowerShell (no reboot needed) and open Ubuntu again"
WORDS = {"STANDBYIDLE": "sleep", "HIBERNATEIDLE": "hibernation"}
# One JSON list of the hetlab rules in both firewalls: name, enabled, local ports, remote addresses.
# The Hyper-V rule holds its ports and addresses itself (MSFT_NetFirewallHyperVRule); a Defender rule
# keeps them in its port and address filters (Get-NetFirewallPortFilter, Get-NetFirewallAddressFilter).
RULES_QUERY = (
    "$h = @(Get-NetFirewallHyperVRule -ErrorAction SilentlyContinue -ErrorVariable he | "
    "Where-Object DisplayName -like 'hetlab*' | "
    "ForEach-Object { [pscustomobject]@{ kind = 'hyperv'; name = $_.DisplayName; enabled = [string]$_.Enabled; "
    "ports = @($_.LocalPorts); remote = @($_.RemoteAddresses) } }); "
    "$d = @(Get-NetFirewallRule -DisplayName 'hetlab*' -ErrorAction SilentlyContinue -ErrorVariable de | "
    "ForEach-Object { [pscustomobject]@{ kind = 'defender'; name = $_.DisplayName; enabled = [string]$_.Enabled; "
    "ports = @(($_ | Get-NetFirewallPortFilter).LocalPort); "
    "remote = @(($_ | Get-NetFirewallAddressFilter).RemoteAddress) } }); "
    "$e = @(@($he) + @($de) | Where-Object { $_ } | ForEach-Object { [pscustomobject]@{ kind = 'error'; "
    "name = [string]$_ } }); "
    "ConvertTo-Json -InputObject @($h + $d + $e) -Compress -Depth 3")


def build_check(build: int | None) -> Check:
    """Windows 11 22H2 (build 22621) or newer, or the one line that says no setting helps."""
    if build is None:
        return Check("Windows build", WARN, "could not read Windows' build from WSL (cmd.exe /c ver)",
                     "check it on Windows: winver must show Windows 11 22H2 or newer (build 22621+)")
    problem = wsl.build_problem(build)
    if problem:
        return Check("Windows build", FAIL, problem.split(". ", 1)[0],
                     problem.split(". ", 1)[1])
    return Check("Windows build", OK, f"build {build}: mirrored networking is available (22621+)")


def networking_check(mode: str, seen: str, build: int | None, config: str | None,
                     package: tuple[int, ...] | None) -> Check:
    """Mirrored networking, or why not: an old build, .wslconfig without it, or .wslconfig with it
    while WSL still runs NAT (WSL before 2.0, or no restart since the edit)."""
    if mode == "mirrored":
        return Check("WSL networking", OK, f"mirrored ({seen}): WSL shares Windows' LAN address; "
                                           f"give it to `hetlab head --ip`")
    detail = f"{mode} ({seen}): the Mac cannot reach Ray inside WSL"
    if wsl.build_problem(build):
        return Check("WSL networking", FAIL, detail, f"Windows build {build} has no mirrored networking: "
                                                     f"see the Windows build line")
    asked = config is not None and "wsl2.networkingMode=mirrored" not in wslconfig.missing(wslconfig.parse(config))
    if not asked:
        return Check("WSL networking", FAIL, detail, f"in Ubuntu: hetlab wslconfig (puts networkingMode="
                                                     f"mirrored into %UserProfile%\\.wslconfig), {RESTART}")
    old = package is None or package < (2, 0)
    why = ("WSL itself is older than 2.0 (`wsl --version` in PowerShell fails or shows 1.x): `wsl --update`, "
           if old else "WSL has not restarted since the edit: ")
    return Check("WSL networking", FAIL, f".wslconfig says mirrored but WSL runs {mode} ({seen})",
                 f"{why}{RESTART}")


def gpu_check(dxg: bool, wsl_smi: str | None, linux_nvidia_smi: bool) -> Check:
    """NVIDIA's Windows driver, seen from WSL: its nvidia-smi (/usr/lib/wsl/lib) names the card.
    /dev/dxg alone proves nothing (any GPU vendor's driver makes it); a Linux driver inside WSL breaks it."""
    if linux_nvidia_smi:
        return Check("WSL GPU", WARN, "nvidia-smi here is not WSL's (/usr/lib/wsl/lib): a Linux NVIDIA "
                                      "driver or its tools were installed inside WSL",
                     "remove the Linux NVIDIA driver packages from WSL: the Windows driver provides "
                     "CUDA to WSL (NVIDIA's CUDA on WSL guide)")
    cards = [line.split(" (UUID", 1)[0] for line in (wsl_smi or "").splitlines() if line.startswith("GPU ")]
    if not cards:
        seen = "/dev/dxg is there (some GPU driver), but " if dxg else "no /dev/dxg and "
        return Check("WSL GPU", FAIL, f"{seen}no NVIDIA driver: {wsl.WSL_SMI} names no card",
                     "install NVIDIA's Windows driver (on Windows, from nvidia.com; not in WSL), then in "
                     "PowerShell `wsl --update` and `wsl --shutdown`, and open Ubuntu again")
    return Check("WSL GPU", OK, f"NVIDIA's Windows driver: {'; '.join(cards)}")


def idle_check(config: str | None, build: int | None = None) -> Check:
    """WSL stops a distro a while after its last window closes, and the VM after that. Below build
    22621 the course's ``.wslconfig`` does not help (``hetlab wslconfig`` refuses): no advice to run it."""
    problem = wsl.build_problem(build)
    if problem:
        return Check("WSL idle shutdown", WARN, problem.split(". ", 1)[0],
                     "keep an Ubuntu window open during a run")
    if config is None:
        return Check("WSL idle shutdown", WARN, "could not read %UserProfile%\\.wslconfig from here",
                     f"in Ubuntu: hetlab wslconfig, {RESTART}; or keep an Ubuntu window open during a run")
    lacking = [line for line in wslconfig.missing(wslconfig.parse(config)) if "IdleTimeout" in line]
    if lacking:
        return Check("WSL idle shutdown", WARN, f".wslconfig lacks {', '.join(lacking)}: WSL may stop "
                                                "mid-run once its windows close",
                     f"in Ubuntu: hetlab wslconfig, {RESTART}; or keep an Ubuntu window open during a run")
    return Check("WSL idle shutdown", OK, ".wslconfig: no idle shutdown (vmIdleTimeout, instanceIdleTimeout -1)")


def power_check(query: str | None) -> Check:
    """Sleep and hibernate on AC power off (``powercfg /query SCHEME_CURRENT SUB_SLEEP``)."""
    values = steps.power_before(query)
    if set(values) != set(steps.POWER_SETTINGS):
        return Check("Windows sleep", WARN, "could not read powercfg's sleep settings from WSL",
                     "in PowerShell as Administrator: " + "; ".join(
                         f"powercfg /change {n} 0" for n in steps.POWER_SETTINGS.values()))
    on = {name: v for name, v in values.items() if v}
    if not on:
        return Check("Windows sleep", OK, "no sleep and no hibernation on AC power")
    said = " and ".join(f"{WORDS[n]} after {v // 60} min" for n, v in on.items())
    return Check("Windows sleep", WARN, f"on AC power Windows goes to {said}: a sleeping desktop ends the run",
                 "in PowerShell as Administrator: " + "; ".join(
                     f"powercfg /change {steps.POWER_SETTINGS[n]} 0" for n in on))


def parse_rules(text: str | None) -> list[dict] | None:
    """The rules ``RULES_QUERY`` printed, or None where PowerShell said nothing readable."""
    try:
        rules = json.loads(text) if text and text.strip() else []
    except ValueError:
        return None
    rules = rules if isinstance(rules, list) else [rules]
    return [{**r, "ports": [str(p) for p in r.get("ports") or []],
             "remote": [str(a) for a in r.get("remote") or []]} for r in rules if isinstance(r, dict)]


def _ports(ranges: list[str]) -> set[int]:
    found = set()
    for r in ranges:
        low, _, high = r.partition("-")
        if low.isdigit() and (high or low).isdigit():
            found |= set(range(int(low), int(high or low) + 1))
    return found


def rules_checks(rules: list[dict] | None, ports: commands.Ports, mac_ip: str | None = None) -> list[Check]:
    """The hetlab rules in both firewalls: Ray's rule admits exactly a node's ports (the head's or a
    joining node's) from one address (the Mac's); Ray Train's, where added, the rendezvous store's."""
    again = "run `hetlab head` (or `hetlab join --windows`) again and paste its part B in PowerShell as Administrator"
    if rules is None:
        return [Check("Windows firewall", WARN, "could not read the firewall rules from WSL (powershell.exe)",
                      "on Windows: Get-NetFirewallHyperVRule and Get-NetFirewallRule -DisplayName 'hetlab*' list them")]
    checks = []
    wanted = {frozenset(ports.listening(head)) for head in (True, False)}
    for name in (steps.RULE, steps.TRAIN_RULE):
        found = {r["kind"]: r for r in rules if r.get("name") == name}
        if name == steps.TRAIN_RULE and not found:
            checks.append(Check("Windows firewall (Ray Train)", OK, "no Ray Train rule: notebook 07 across the "
                                                                    "pair needs it (part B of `hetlab head`)"))
            continue
        label = "Windows firewall" + (" (Ray Train)" if name == steps.TRAIN_RULE else "")
        errors = [r["name"].splitlines()[0] for r in rules if r.get("kind") == "error" and r.get("name")]
        problems = [f"no {kind} rule '{name}'" + (f" (Windows said: {errors[0]})" if errors else "")
                    for kind in ("hyperv", "defender") if kind not in found]
        for kind, rule in found.items():
            have = _ports(rule["ports"])
            if rule.get("enabled") in ("False", "2"):   # NetSecurity's Enabled: True = 1, False = 2
                problems.append(f"the {kind} rule is disabled")
            if name == steps.RULE and frozenset(have) not in wanted:
                problems.append(f"the rule opens {','.join(rule['ports'])}, not this node's Ray ports")
            if name == steps.TRAIN_RULE and have != {ports.train_rendezvous}:
                problems.append(f"the rule opens {','.join(rule['ports'])}, not the rendezvous port "
                                f"{ports.train_rendezvous} alone")
            if len(rule["remote"]) != 1 or rule["remote"][0].lower() == "any":
                problems.append(f"the rule admits {','.join(rule['remote']) or 'anyone'}, not one address")
            elif mac_ip and rule["remote"][0] != mac_ip:
                problems.append(f"the rule admits {rule['remote'][0]}, not the Mac's {mac_ip}")
        remote = next((r["remote"][0] for r in found.values() if len(r["remote"]) == 1), "?")
        problems = list(dict.fromkeys(problems))   # the same finding in both firewalls, said once
        checks.append(Check(label, WARN if problems else OK, "; ".join(problems) if problems else
                            f"'{name}' in both firewalls, from {remote} only", again))
    return checks


def windows_side_signs() -> dict:
    """What the Windows side says, through interop (each None where it cannot be read)."""
    query = wsl.run_windows(["powercfg.exe", "/query", "SCHEME_CURRENT", "SUB_SLEEP"])
    rules = wsl.run_windows(["powershell.exe", "-NoProfile", "-NonInteractive", "-Command", RULES_QUERY])
    return {"powercfg": query, "rules": parse_rules(rules)}
