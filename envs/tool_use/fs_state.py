"""The FileOps state walker, run inside the sandbox as ``python3 -I -c SOURCE ROOT`` (stdlib only, >= 3.9).

Prints one JSON object mapping each path under ROOT (relative, ``/``-separated, symlinks not followed) to
its state:

    ["dir"]                          a directory
    ["file", SHA256]                 a regular file, by content
    ["tar.gz", [[MEMBER, SHA256]]]   a ``*.tar.gz`` / ``*.tgz`` that opens as a gzip tar: its regular-file
                                     members (leading ``./`` dropped), sorted; not the archive bytes, which
                                     carry timestamps
    ["badarchive", SHA256]           named like an archive but not a readable gzip tar
    ["link", TARGET] / ["other"]     a symlink / anything else (fifo, socket)
    ["unreadable", ERROR]            a file or folder the walker could not read

The host builds the same mapping from its model of the expected tree (``fileops_tasks.py``) and compares.
"""

import hashlib
import json
import os
import stat
import sys
import tarfile

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


def digest(data):
    return hashlib.sha256(data).hexdigest()


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


def archive_state(path):
    members = []
    with tarfile.open(path, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            name = member.name
            while name.startswith("./"):
                name = name[2:]
            members.append([name, digest(tar.extractfile(member).read())])
    return ["tar.gz", sorted(members)]


def entry_state(path, name):
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return ["link", os.readlink(path)]
        if stat.S_ISDIR(st.st_mode):
            return ["dir"]
        if not stat.S_ISREG(st.st_mode):
            return ["other"]
        if name.endswith(ARCHIVE_SUFFIXES):
            try:
                return archive_state(path)
            except (tarfile.TarError, EOFError, OSError, ValueError):
                return ["badarchive", file_digest(path)]
        return ["file", file_digest(path)]
    except OSError as e:
        return ["unreadable", e.strerror or str(e)]


def walk(root):
    state = {}

    def on_error(err):
        rel = os.path.relpath(err.filename, root)
        if rel != ".":
            state[rel] = ["unreadable", err.strerror or str(err)]

    for folder, dirs, files in os.walk(root, onerror=on_error):
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if rel not in state:
                state[rel] = entry_state(path, name)
    return state


def main(argv):
    root = argv[1] if len(argv) > 1 else "."
    json.dump(walk(root), sys.stdout, sort_keys=True, separators=(",", ":"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
