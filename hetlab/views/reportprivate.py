"""What stays out of the learner's report (``hetlab report``): tokens, addresses, host names.

Anything that looks like an IPv4 address (private ones too: 10.x, 172.16–31.x, 192.168.x) or a token
(32 hex digits or more) is left out of every line. Host names that the saved files hold become the
role they stand for ("desktop", "mac"; "this machine" where one box held both) unless the learner
asks for them (``--names``); any other ``.local`` name is left out.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from hetlab.store import measured

ROLES = ("desktop", "mac")
_ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\b[0-9a-fA-F]{32,}\b")
_HOST_NAME = re.compile(r"\b[\w-]+\.(?:local|lan|home|localdomain)\b")


def clean(text: str) -> str:
    """``text`` with anything that looks like an IP address (private ones too) or a token left out."""
    return _ADDRESS.sub("(left out)", str(text))


ONE_BOX = "this machine"


def hosts(source: Path) -> dict[str, str]:
    """Every host name a saved file holds → the role it stands for (a run's host is the desktop's);
    a host that holds both roles (the practice cluster, the rehearsal's one box) → "this machine"."""
    names = {}

    def name(host, role):
        if host:
            names[host] = role if names.get(host, role) == role else ONE_BOX

    for role in ROLES:
        data = measured.load(role, source)
        name((data or {}).get("host"), role)
    machines = measured.load_figure("machines", source)
    for role, facts in ((machines or {}).get("machines") or {}).items():
        name(facts.get("hostname"), role)
    for p in sorted(source.glob("*.json")):
        try:
            host = json.loads(p.read_text(encoding="utf-8")).get("host")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(host, str) and host:
            names.setdefault(host, "desktop")
    return names


def redact(text: str, hosts: dict[str, str]) -> str:
    """Host names as their roles, then addresses, tokens and any other ``.local`` name left out."""
    for host in sorted(hosts, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", hosts[host], text)
    return _HOST_NAME.sub("(a host name, left out)", clean(text))
