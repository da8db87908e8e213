r"""Windows' ``%UserProfile%\.wslconfig``, read and edited safely from inside WSL (``hetlab wslconfig``;
README, "Windows desktop").

``edit`` adds or replaces only the course's keys (``WSLCONFIG``) and keeps every other line, so a
second run changes nothing; ``write`` keeps the file from before hetlab's first edit in
``.wslconfig.hetlab-backup``; ``undo`` takes back only hetlab's own values (``unedit``).
"""
from __future__ import annotations

import re
from pathlib import Path

from hetlab.errors import HetlabError

# The course's three settings (Microsoft's "Advanced settings configuration in WSL",
# learn.microsoft.com/windows/wsl/wsl-config).
WSLCONFIG = {"wsl2": {"networkingMode": "mirrored", "vmIdleTimeout": "-1"},
             "general": {"instanceIdleTimeout": "-1"}}
BACKUP_SUFFIX = ".hetlab-backup"   # beside the file: .wslconfig.hetlab-backup
_HEADER = re.compile(r"^\s*\[([^\]]+)\]\s*(?:#.*)?$")
_KEY = re.compile(r"^(\s*)([A-Za-z0-9_.]+)(\s*=\s*)([^#\r\n]*?)(\s*(?:#.*)?)$")


def parse(text: str) -> dict[str, dict[str, str]]:
    """``.wslconfig`` as {section: {key: value}}; sections in lower case, keys as written, ``#`` comments dropped."""
    sections: dict[str, dict[str, str]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip().lower(), {})
        elif "=" in line and current is not None:
            key, value = line.split("=", 1)
            current[key.strip()] = value.strip()
    return sections


def missing(config: dict[str, dict[str, str]]) -> list[str]:
    """The ``section.key=value`` settings of ``WSLCONFIG`` that ``config`` lacks (keys and values
    compared without case, as WSL reads them)."""
    found = []
    for section, wanted in WSLCONFIG.items():
        have = {k.lower(): v.lower() for k, v in config.get(section, {}).items()}
        found += [f"{section}.{key}={value}" for key, value in wanted.items()
                  if have.get(key.lower()) != value.lower()]
    return found


def lines() -> list[str]:
    """``WSLCONFIG`` as the lines of a ``.wslconfig`` file."""
    out = []
    for section, keys in WSLCONFIG.items():
        out += [f"[{section}]"] + [f"{key}={value}" for key, value in keys.items()]
    return out


def edit(text: str) -> str:
    """``text`` with hetlab's keys added or replaced in their sections; every other line kept.

    A key already set right is left untouched, so ``edit(edit(t)) == edit(t)``. A missing
    section is added at the end; the file's line ending (CRLF from Notepad, or LF) is kept.
    """
    newline = "\r\n" if "\r\n" in text else "\n"
    rows = text.splitlines()
    for section, wanted in WSLCONFIG.items():
        start = next((i for i, row in enumerate(rows) if (m := _HEADER.match(row))
                      and m.group(1).strip().lower() == section), None)
        if start is None:
            if rows and rows[-1].strip():
                rows.append("")
            rows += [f"[{section}]"] + [f"{key}={value}" for key, value in wanted.items()]
            continue
        end = next((i for i in range(start + 1, len(rows)) if _HEADER.match(rows[i])), len(rows))
        last = start
        for key, value in wanted.items():
            found = False
            for i in range(start + 1, end):
                m = _KEY.match(rows[i])
                if m and m.group(2).lower() == key.lower():
                    found = True
                    if m.group(4).strip().lower() != value.lower():
                        rows[i] = f"{m.group(1)}{m.group(2)}{m.group(3)}{value}{m.group(5)}"
            if not found:
                last = max((i for i in range(start, end) if rows[i].strip()), default=start)
                rows.insert(last + 1, f"{key}={value}")
                end += 1
    return newline.join(rows) + newline


def _decode(data: bytes) -> tuple[str, str]:
    for bom, encoding in ((b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"), (b"\xef\xbb\xbf", "utf-8-sig")):
        if data.startswith(bom):
            return data.decode(encoding), encoding
    return data.decode("utf-8", errors="replace"), "utf-8"


def write(path: Path) -> list[str]:
    """Edit the file at ``path`` in place (made if missing); returns the settings it changed
    (``[]``: nothing to do, the file untouched). The first edit keeps the file as it was in
    ``<path>.hetlab-backup`` (empty when there was no file); a later edit keeps that backup."""
    path = Path(path)
    old, encoding = _decode(path.read_bytes()) if path.exists() else ("", "utf-8")
    changed = missing(parse(old))
    if not changed:
        return []
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    try:
        if not backup.exists():
            backup.write_bytes(path.read_bytes() if path.exists() else b"")
        path.write_bytes(edit(old).encode(encoding))
    except OSError as exc:
        raise HetlabError(f"could not write {path} ({exc.strerror}): edit it by hand in Notepad, "
                          f"adding {' and '.join(lines())}.") from None
    return changed


def unedit(text: str, before: str) -> str:
    """``text`` with hetlab's edit taken back, and every change of yours since kept: a course key
    still at hetlab's value gets ``before``'s value back, or goes if ``before`` had none; a key
    you changed since stays; every other line stays; a section hetlab added and left empty goes."""
    had = {section: {k.lower(): v for k, v in keys.items()} for section, keys in parse(before).items()}
    newline = "\r\n" if "\r\n" in text else "\n"
    blocks: list[list[str]] = [[]]          # the lines before the first section, then one block per section
    for row in text.splitlines():
        if _HEADER.match(row):
            blocks.append([])
        blocks[-1].append(row)
    out = []
    for block in blocks:
        m = _HEADER.match(block[0]) if block else None
        section = m.group(1).strip().lower() if m else None
        wanted = {k.lower(): v for k, v in WSLCONFIG.get(section, {}).items()}
        kept = []
        for row in block:
            key = _KEY.match(row)
            name = key.group(2).lower() if key else None
            if name not in wanted or key.group(4).strip().lower() != wanted[name].lower():
                kept.append(row)                # not hetlab's, or yours since
            elif name in had.get(section, {}):
                kept.append(f"{key.group(1)}{key.group(2)}{key.group(3)}{had[section][name]}{key.group(5)}")
        if m and section in WSLCONFIG and section not in had and not any(r.strip() for r in kept[1:]):
            while out and not out[-1].strip():  # the blank line edit put before it
                out.pop()
            continue
        out += kept
    return newline.join(out) + newline if any(r.strip() for r in out) else ""


def undo(path: Path) -> str:
    """Take back hetlab's edit (``unedit``, against the backup of the file hetlab first found),
    keeping what you changed since; the file is deleted only if nothing is left in it. Returns
    what was done, in one line."""
    path = Path(path)
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if not backup.exists():
        return f"no {backup.name} here: hetlab never edited {path.name}; nothing to undo"
    before, _ = _decode(backup.read_bytes())
    if not path.exists():
        backup.unlink()
        return f"{path.name} is already gone; its backup removed"
    now, encoding = _decode(path.read_bytes())
    text = unedit(now, before)
    if text.strip():
        path.write_bytes(text.encode(encoding))
        done = f"hetlab's settings taken out of {path.name}; the lines you wrote or changed stay"
    else:
        path.unlink()
        done = f"{path.name} removed (hetlab had made it, and nothing else is in it)"
    backup.unlink()
    return done
