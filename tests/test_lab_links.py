"""Every link in a notebook opens in `make lab`'s JupyterLab (issue 43, item 6). The lab opens
nothing above the folder its server serves: a link there is dead, no tab, no dialog. This starts the
lab's own server on the folder the Makefile's `lab` recipe serves (on 127.0.0.1, a free port, a
token) and asks its contents API for each link's target, and for the links of the pages they open;
then stops it by its own PID."""
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from hetlab.cluster.practice import free_ports

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def lab_root(makefile: str) -> Path:
    """The folder `make lab` serves: its recipe's `cd X &&`, else its --ServerApp.root_dir, else the checkout."""
    recipe = re.search(r"^lab:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    line = next(ln for ln in recipe.splitlines() if "jupyter lab" in ln)
    served = ROOT
    if cd := re.search(r"\bcd (\S+) &&", line):
        served = ROOT / cd.group(1)
    if root_dir := re.search(r"--ServerApp\.root_dir='?\$\(CURDIR\)/?([^' ]*)", line):
        served = served / root_dir.group(1)
    return served.resolve()


def links(text: str) -> list[str]:
    """The relative links of Markdown text: web addresses and in-page anchors left out."""
    return [t for t in LINK.findall(text) if "://" not in t and not t.startswith(("mailto:", "#"))]


def notebook_links() -> list[tuple[Path, str]]:
    found = []
    for nb in NOTEBOOKS:
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "markdown":
                found += [(nb, t) for t in links("".join(cell["source"]))]
    return found


def in_lab(root: Path, page: Path, link: str) -> tuple[str | None, str]:
    """The link's target as the lab's path (None when it lies above the lab's root), and its anchor."""
    path, _, anchor = link.partition("#")
    target = Path(os.path.normpath(page.parent / urllib.parse.unquote(path)))
    rel = os.path.relpath(target, root)
    return (None if rel.startswith("..") else Path(rel).as_posix()), anchor


def test_the_lab_root_is_read_from_the_recipe():
    """The checker itself: the lab of `cd notebooks && jupyter lab` (before issue 43) left the
    answers' links dead, and the check sees it."""
    old = lab_root("lab: x\n\tcd notebooks && $(BIN)/jupyter lab 00_setup_check.ipynb\n")
    assert old == ROOT / "notebooks"
    assert in_lab(old, ROOT / "notebooks" / "05.ipynb", "../docs/answers/05.md") == (None, "")
    assert lab_root("lab: x\n\t$(BIN)/jupyter lab --ServerApp.root_dir='$(CURDIR)' notebooks/00.ipynb\n") == ROOT


@pytest.mark.ray   # a JupyterLab server
def test_every_notebook_link_opens_in_the_labs_own_server(tmp_path):
    makefile = (ROOT / "Makefile").read_text()
    root = lab_root(makefile)
    found = notebook_links()
    assert len(found) >= 2 * len(NOTEBOOKS), "each notebook links its answers and the reference figures"
    outside = sorted({f"{nb.name[:2]}: {link}" for nb, link in found if in_lab(root, nb, link)[0] is None})
    assert not outside, f"links above the folder `make lab` serves ({root}), dead in the lab: {outside}"
    opened = re.search(r"jupyter lab .*?(\S+\.ipynb)", makefile).group(1)

    port, token, log = free_ports(1)[0], os.urandom(16).hex(), open(tmp_path / "lab.log", "w")
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}    # this user's own Jupyter config stays out
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.token={token}",
         f"--ServerApp.root_dir={root}", f"--LabApp.app_settings_dir={ROOT / 'jupyter' / 'settings'}"]
        + (["--allow-root"] if os.geteuid() == 0 else []),     # a container may run the tests as root
        env=env, stdout=subprocess.DEVNULL, stderr=log)

    def get(path: str):
        url = f"http://127.0.0.1:{port}/api/contents/{urllib.parse.quote(path)}"
        request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as e:
            return {"error": e.code}

    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, f"the lab's server stopped: {(tmp_path / 'lab.log').read_text()[-2000:]}"
            try:
                if "type" in get(""):
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "the lab's server did not answer within 90 s"
            time.sleep(0.3)

        assert get(os.path.relpath(ROOT / opened, root)).get("type") == "notebook", f"make lab opens {opened}"
        dead, pages = [], {}
        for nb, link in found:
            path, anchor = in_lab(root, nb, link)
            if path not in pages:
                pages[path] = get(path)
            page = pages[path]
            if "error" in page:
                dead.append(f"{nb.name[:2]}: {link} (HTTP {page['error']})")
            elif anchor and f'id="{anchor}"' not in page["content"]:
                dead.append(f"{nb.name[:2]}: {link} (no anchor {anchor!r} on the page)")
        # The pages a notebook opens link on (an answers page back to its notebook): those open too.
        for path, page in list(pages.items()):
            if path.endswith(".md") and "content" in page:
                for link in links(page["content"]):
                    target, _ = in_lab(root, root / path, link)
                    if target is None or "error" in get(target):
                        dead.append(f"{path}: {link}")
        assert not dead, f"links the lab cannot open: {dead}"
    finally:
        server.terminate()                      # its own PID: the server shuts down on SIGTERM
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
