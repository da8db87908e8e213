"""Where a search writes its results and checkpoints, and whether every machine can use it
(notebook 09, ``hetlab.search.driver``).

``open_storage`` accepts a folder, a URI (``s3://bucket/runs``, ``gs://…``, ``file://…``) or a
path inside a pyarrow filesystem (Ray Tune's ``storage_filesystem``), and before any cluster
starts writes, reads back and deletes a file there from this machine: a read-only or missing
folder, an unknown scheme or missing credentials is one line at once. ``check_storage`` then asks
every machine to read a file written here and to write, read back and delete one of its own.
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
from hetlab.search.trial import probe_storage, write_read_delete


@dataclass
class Storage:
    """Where a search writes: ``fs`` and ``folder`` for this process, ``where`` for a node's probe
    (a URI each node opens itself, or the pyarrow filesystem), and what Ray Tune is given."""

    fs: object
    folder: str
    where: object
    ray_path: str
    ray_fs: object = None

    def shown(self, name: str) -> str:
        return f"{self.ray_path.rstrip('/')}/{name}"


def open_storage(storage_path, storage_filesystem=None) -> Storage:
    """``storage_path`` (a folder, a URI such as ``s3://bucket/runs``, or a path inside
    ``storage_filesystem``, a pyarrow filesystem) as a ``Storage``, or one line saying what is wrong."""
    from pyarrow import fs as pafs
    if storage_filesystem is not None:
        if not isinstance(storage_filesystem, pafs.FileSystem):
            raise HetlabError(f"storage_filesystem={storage_filesystem!r}: give a pyarrow.fs.FileSystem "
                              f"(e.g. pyarrow.fs.S3FileSystem(...)), or None.")
        if not isinstance(storage_path, str) or not storage_path:
            raise HetlabError("storage_filesystem= needs storage_path=, the folder inside that filesystem.")
        return _usable_here(Storage(storage_filesystem, storage_path.rstrip("/"), storage_filesystem,
                                    storage_path, storage_filesystem))
    if storage_path is None:
        folder = tempfile.mkdtemp(prefix="hetlab-search-")
        return Storage(pafs.LocalFileSystem(), folder, pafs.LocalFileSystem(), folder)
    if not isinstance(storage_path, (str, os.PathLike)) or not str(storage_path).strip():
        raise HetlabError(f"storage_path={storage_path!r}: give a folder or a URI (e.g. s3://bucket/runs), "
                          f"or leave it out for a temporary folder on this machine.")
    if "://" in str(storage_path):
        try:
            fs, folder = pafs.FileSystem.from_uri(str(storage_path))
        except Exception as e:  # noqa: BLE001 - pyarrow's error for this URI, as one line
            raise HetlabError(f"storage_path {storage_path}: pyarrow cannot open it "
                              f"({' '.join(str(e).split())[:120]}).") from None
        return _usable_here(Storage(fs, folder.rstrip("/"), str(storage_path), str(storage_path)))
    folder = os.path.abspath(storage_path)
    return _usable_here(Storage(pafs.LocalFileSystem(), folder, pafs.LocalFileSystem(), folder))


def _usable_here(storage: Storage) -> Storage:
    """``storage`` if this machine can write, read back and delete a file in its folder (which
    must exist: a shared folder's mount point, a bucket); else one line saying what failed."""
    from pyarrow import fs as pafs
    try:
        kind = storage.fs.get_file_info(storage.folder).type
    except Exception as e:  # noqa: BLE001 - any filesystem's error (credentials, network), as one line
        raise HetlabError(f"storage {storage.ray_path}: this machine cannot look there ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:100]}).") from None
    if kind != pafs.FileType.Directory:
        raise HetlabError(f"storage {storage.ray_path}: no such folder here: create it (on every machine "
                          f"that runs trials), or give another.")
    failed = write_read_delete(storage.fs, storage.folder)
    if failed:
        raise HetlabError(f"storage {storage.ray_path}: this machine {failed}.")
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
        asked = {role: probe.options(**placement(role)).remote(storage.where, storage.folder, marker)
                 for role in roles}
        window = patience(60)
        done, _ = ray.wait(list(asked.values()), num_returns=len(asked), timeout=window)
        said = {role: ray.get(ref) if ref in done else f"did not answer within {window:.0f} s: is that "
                f"machine busy, or its Ray stopped? (`hetlab doctor` there)" for role, ref in asked.items()}
        return next(((role, why) for role, why in said.items() if why), None)
    finally:
        storage.fs.delete_file(f"{storage.folder}/{marker}")
