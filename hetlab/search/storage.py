"""Where a search writes its results, and whether every machine can use it (notebook 09,
``hetlab.search.driver``).

``open_storage`` accepts a folder or a URI (``s3://bucket/runs``, ``gs://…``, ``file://…``), and
before any cluster starts writes, reads back and deletes a file there from this machine: a
read-only or missing folder, an unknown scheme or missing credentials is one line at once.
``check_storage`` then asks every machine to read a file written here and to write, read back and
delete one of its own.
"""
from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass

import ray

from hetlab.cluster.roles import placement
from hetlab.core.machine import patience
from hetlab.errors import HetlabError


@dataclass
class Storage:
    """Where a search writes: ``fs`` and ``folder`` for this process, ``path`` (the folder or URI)
    for Ray Tune and for each node, which opens it itself."""

    fs: object
    folder: str
    path: str

    def shown(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"


def open_storage(storage_path) -> Storage:
    """``storage_path`` (a folder or a URI such as ``s3://bucket/runs``; None: a new temporary folder
    here) as a ``Storage``, or one line saying what is wrong."""
    from pyarrow import fs as pafs
    if storage_path is None:
        folder = tempfile.mkdtemp(prefix="hetlab-search-")
        return Storage(pafs.LocalFileSystem(), folder, folder)
    if not isinstance(storage_path, (str, os.PathLike)) or not str(storage_path).strip():
        raise HetlabError(f"storage_path={storage_path!r}: give a folder or a URI (e.g. s3://bucket/runs), "
                          f"or leave it out for a temporary folder on this machine.")
    if "://" in str(storage_path):
        try:
            fs, folder = pafs.FileSystem.from_uri(str(storage_path))
        except Exception as e:  # noqa: BLE001 - pyarrow's error for this URI, as one line
            raise HetlabError(f"storage_path {storage_path}: pyarrow cannot open it "
                              f"({' '.join(str(e).split())[:120]}).") from None
        storage = Storage(fs, folder.rstrip("/"), str(storage_path))
    else:
        folder = os.path.abspath(storage_path)
        storage = Storage(pafs.LocalFileSystem(), folder, folder)
    try:
        kind = storage.fs.get_file_info(storage.folder).type
    except Exception as e:  # noqa: BLE001 - any filesystem's error (credentials, network), as one line
        raise HetlabError(f"storage {storage.path}: this machine cannot look there ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:100]}).") from None
    if kind != pafs.FileType.Directory:
        raise HetlabError(f"storage {storage.path}: no such folder here: create it (on every machine "
                          f"that runs trials), or give another.")
    failed = write_read_delete(storage.fs, storage.folder)
    if failed:
        raise HetlabError(f"storage {storage.path}: this machine {failed}.")
    return storage


def check_storage(storage: Storage, roles) -> tuple | None:
    """None if every node of ``roles`` can read a file written here, and write, read back and
    delete one of its own in ``storage``; else ``(role, what failed)`` for the first that
    cannot. It also warms each node for its first trial."""
    marker = f".hetlab-reach-{uuid.uuid4().hex[:8]}"
    with storage.fs.open_output_stream(f"{storage.folder}/{marker}") as f:
        f.write(b"hetlab")
    try:
        probe = ray.remote(num_cpus=0)(probe_storage)
        asked = {role: probe.options(**placement(role)).remote(storage.path, marker) for role in roles}
        window = patience(60)
        done, _ = ray.wait(list(asked.values()), num_returns=len(asked), timeout=window)
        said = {role: ray.get(ref) if ref in done else f"did not answer within {window:.0f} s: is that "
                f"machine busy, or its Ray stopped? (`hetlab doctor` there)" for role, ref in asked.items()}
        return next(((role, why) for role, why in said.items() if why), None)
    finally:
        storage.fs.delete_file(f"{storage.folder}/{marker}")


def probe_storage(path: str, marker: str) -> str:
    """Run on a node before the search: read the driver's ``marker`` in ``path`` (a folder or a
    URI), then write, read back and delete a file of its own. Returns "" if all worked, else what
    failed, in a few words. It imports the trial's module (torch with it): that node keeps a warm
    process for its first trial."""
    from pyarrow import fs as pafs

    import hetlab.search.trial  # noqa: F401 - the warm-up
    try:
        filesystem, folder = pafs.FileSystem.from_uri(path)   # a local folder too
        with filesystem.open_input_stream(f"{folder}/{marker}") as f:
            if f.read() != b"hetlab":
                return "read the desktop's test file but found other content"
    except Exception as e:  # noqa: BLE001 - any filesystem's error, as one line
        return f"cannot read the test file the driver wrote ({type(e).__name__})"
    return write_read_delete(filesystem, folder)


def write_read_delete(filesystem, folder: str) -> str:
    """Write, read back and delete a file of this process's in ``folder``: "" if all worked, else
    what failed, in a few words (``probe_storage`` on each node, ``open_storage`` here)."""
    mine = f"{folder}/.hetlab-node-{uuid.uuid4().hex[:8]}"
    try:
        with filesystem.open_output_stream(mine) as f:
            f.write(b"node")
        with filesystem.open_input_stream(mine) as f:
            ok = f.read() == b"node"
        filesystem.delete_file(mine)
        return "" if ok else "wrote a file but read back other content"
    except Exception as e:  # noqa: BLE001 - any filesystem's error (read-only, credentials), as one line
        return f"cannot write, read back and delete a file there ({type(e).__name__}: {' '.join(str(e).split())[:80]})"
