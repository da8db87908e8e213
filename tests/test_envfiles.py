"""The Mac and the desktop must run the same Python, Ray and torch: Ray refuses nodes
whose versions differ. These pins are the contract; check they agree everywhere."""
import re
import sys
from pathlib import Path

import ray
import torch
import yaml

from hetlab.tools import doctor

ROOT = Path(__file__).resolve().parents[1]


def pins(env_file):
    env = yaml.safe_load((ROOT / env_file).read_text())
    deps = env["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python="))
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    found = {"python": python.split("=", 1)[1]}
    for line in pip:
        m = re.match(r"(torch|ray)(\[[^\]]*\])?==([\w.]+)", line)
        if m:
            found[m.group(1)] = m.group(3)
    return env, found


def test_mac_and_cuda_environments_pin_the_same_versions():
    mac_env, mac = pins("environment-mac.yml")
    cuda_env, cuda = pins("environment-cuda.yml")
    assert mac == cuda
    assert set(mac) == {"python", "torch", "ray"}
    assert re.fullmatch(r"3\.11\.\d+", mac["python"]), "pin Python to the patch: Ray checks it"
    assert mac["python"] == doctor.PINNED_PYTHON  # what `hetlab doctor` and notebook 00 check against
    assert mac_env["variables"]["PYTORCH_ENABLE_MPS_FALLBACK"] == "1"
    # the multi-node opt-in belongs to the Mac's `ray start` line (hetlab join prints it), not to
    # every process: set for a local Ray too, it moves that Ray off 127.0.0.1
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in mac_env["variables"]
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in (cuda_env.get("variables") or {})


def test_pyproject_pins_agree_with_the_environments_and_this_install():
    _, env = pins("environment-cuda.yml")
    text = (ROOT / "pyproject.toml").read_text()
    assert f'"torch=={env["torch"]}"' in text
    assert f'"ray[default,train]=={env["ray"]}"' in text
    assert 'requires-python = "==3.11.*"' in text
    assert torch.__version__.split("+")[0] == env["torch"]
    assert ray.__version__ == env["ray"]
    assert sys.version_info[:2] == (3, 11)


def test_importing_ray_builds_no_uri_grammar():
    """Every Ray worker and agent imports Ray; jsonschema 4.24+ then imports rfc3987-syntax, whose
    Lark grammar costs ~1.9 s of CPU per process (pyproject pins jsonschema<4.24)."""
    import subprocess
    code = "import sys, ray; print('rfc3987_syntax' in sys.modules, 'lark' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr


def test_each_environment_is_the_one_environment_of_its_machine():
    """issue 28: the conda environment holds hetlab and its test tools itself, so `make lab` and
    `make test` need no .venv on top of it (tests/test_makefile.py checks that make then uses it)."""
    for name in ("environment-mac.yml", "environment-cuda.yml"):
        env, _ = pins(name)
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
        assert any(re.fullmatch(r"-e \.\[test\]", line.split("#")[0].strip()) for line in pip), name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    steps = readme[readme.index("### One environment per machine"):readme.index("## 4 · Start the course")]
    assert "conda activate hetlab" in steps and "make clean-venv" in steps
    assert "build no `.venv`" in steps
