"""Build ``.gpu-carry/``: what a leased GPU machine needs to run ``hetlab gpu-check`` (docs/gpu-machine.md).

That machine has Python 3.12 and its own CUDA torch, no Ray, and no package registry; at most
64 MiB travels per call, the working tree included. Ray 2.60.0's cp312 wheel alone is 75.6 MiB,
of which 30.7 MiB is Ray's Java jar. This script, run HERE (where PyPI answers):

1. downloads the Ray wheel and the few wheels Ray needs that the machine lacks (``DEPS``) into a
   cache outside the repository (``--cache``, default /tmp/hetlab-gpu-carry);
2. writes a slim copy of the Ray wheel to ``.gpu-carry/wheels/``: the same wheel without the
   parts this check never loads (``PRUNE``: Java, RLlib, Serve, Ray LLM, the dashboard's web UI)
   and without their lines in its RECORD, so ``pip install --no-index`` takes it as it is;
3. copies the dependency wheels beside it, writes ``hetlab-commit`` (this checkout's commit,
   for the record: the machine gets no .git) and ``ray-wheel.txt`` (what was left out);
4. adds up what would travel (tracked files + .gpu-carry/) and fails if it is over 64 MiB.

    .venv/bin/python scripts/gpu_carry.py          # then: run(..., carry=[".gpu-carry"])
    .venv/bin/python scripts/gpu_carry.py --check  # sizes only, nothing downloaded or written
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / ".gpu-carry"
RAY = "ray==2.60.0"
# Ray's own requirements that the GPU machine's Python lacks (its list: /work/.library/device/
# KINDS.md; click, filelock, msgpack, packaging, protobuf, pyyaml, requests, aiohttp, pandas,
# pyarrow, fsspec are there): jsonschema for Ray's runtime environments, pydantic for Ray Train V2.
DEPS = ("jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "pydantic",
        "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions")
PRUNE = ("ray/jars/", "ray/rllib/", "ray/serve/", "ray/llm/", "ray/dashboard/client/build/")
LIMIT = 64 * 2**20     # what travels per call: the working tree + carried paths
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")


def download(names, dest: Path) -> None:
    """``pip download`` cp312 x86-64 wheels, no dependencies (each one is named)."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + list(names), check=True)


def slim_wheel(src: Path, dest: Path, prune=PRUNE) -> dict:
    """Copy the wheel ``src`` to ``dest`` (a file) without the entries under ``prune`` (path
    prefixes), and without their RECORD lines. Returns sizes and what was left out."""
    dropped, kept_bytes = {}, 0
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        for info in zin.infolist():
            prefix = next((p for p in prune if info.filename.startswith(p)), None)
            if prefix is not None:
                dropped[prefix] = dropped.get(prefix, 0) + info.compress_size
                continue
            if info.filename == record_name:
                continue
            zout.writestr(info, zin.read(info.filename), compresslevel=9)
            kept_bytes += info.file_size
        lines = [line for line in zin.read(record_name).decode().splitlines()
                 if line and not any(line.startswith(p) for p in prune)]
        zout.writestr(record_name, "\n".join(lines) + "\n")
    return {"source_bytes": src.stat().st_size, "slim_bytes": dest.stat().st_size,
            "dropped_compressed_bytes": dropped}


def tracked_bytes() -> int:
    """Bytes of the files git tracks here (what the working tree sends, less untracked files)."""
    names = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                           check=True).stdout.split(b"\0")
    return sum((ROOT / n.decode()).stat().st_size for n in names if n and (ROOT / n.decode()).is_file())


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def commit() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return head + ("-dirty" if dirty else "")


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def wheel_glob(dist: str) -> str:
    """The cached wheel of ``dist`` at this venv's version (a file name spells it with ``_``)."""
    return f"{dist.replace('-', '_')}-{version(dist)}-*.whl"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", type=Path, default=Path("/tmp/hetlab-gpu-carry"),
                   help="where the full downloads stay (outside the repository)")
    p.add_argument("--check", action="store_true", help="only add up what would travel now")
    args = p.parse_args(argv)
    if not args.check:
        args.cache.mkdir(parents=True, exist_ok=True)
        if not list(args.cache.glob("ray-2.60.0-cp312-*.whl")):
            download([RAY], args.cache)
        missing = [d for d in DEPS if not list(args.cache.glob(wheel_glob(d)))]
        if missing:  # the versions of this venv: a set that works together (pydantic needs its own core)
            download([f"{d}=={version(d)}" for d in missing], args.cache)
        shutil.rmtree(CARRY, ignore_errors=True)
        (CARRY / "wheels").mkdir(parents=True)
        ray_wheel = next(args.cache.glob("ray-2.60.0-cp312-*.whl"))
        sizes = slim_wheel(ray_wheel, CARRY / "wheels" / ray_wheel.name)
        for d in DEPS:
            shutil.copy2(next(args.cache.glob(wheel_glob(d))), CARRY / "wheels")
        (CARRY / "hetlab-commit").write_text(commit() + "\n")
        left_out = ", ".join(f"{k} ({mib(v)})" for k, v in sizes["dropped_compressed_bytes"].items())
        (CARRY / "ray-wheel.txt").write_text(
            f"ray 2.60.0 cp312 wheel, {mib(sizes['source_bytes'])}, slimmed to {mib(sizes['slim_bytes'])}: "
            f"left out {left_out}\n")
        print(f"Ray wheel {mib(sizes['source_bytes'])} → {mib(sizes['slim_bytes'])} (left out {left_out})")
    deps = sum(folder_bytes(CARRY / "wheels") - (CARRY / "wheels" / w.name).stat().st_size
               for w in (CARRY / "wheels").glob("ray-*.whl")) if (CARRY / "wheels").is_dir() else 0
    tree, carry = tracked_bytes(), folder_bytes(CARRY)
    print(f"dependency wheels {mib(deps)}; .gpu-carry/ {mib(carry)}; tracked files {mib(tree)}; "
          f"together {mib(tree + carry)} of the {mib(LIMIT)} a call carries")
    if tree + carry > LIMIT:
        print("too much for one call: see docs/gpu-machine.md (two calls)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
