"""Seeded FileOps tasks: an initial file tree, 1-3 operations, and the expected final state.

The tree has one folder or file per role, each under a name drawn from the seed: a text folder (.txt and .md
notes), a data folder (.csv and .json), an INI config, a logs folder (with a subfolder), a scratch folder
(.tmp/.bak/.swp litter among files to keep, nested), a word list with duplicates, a changelog and a README.
Each operation kind works on its own role, so the operations of one task commute:

    create        create a file (in a new folder) with given lines
    rename_ext    rename every .txt in the text folder to .md
    move_glob     move every .csv of the data folder into a new subfolder
    delete_match  delete files with given suffixes anywhere under the scratch folder
    set_config    set one key of one INI section to a new value
    append_line   append a line to the changelog
    archive_dir   pack the logs folder into LOGS.tar.gz (members LOGS/...) and delete the folder
    sort_unique   sort a word list and drop duplicate lines, in place

The expected state is computed here by applying the operations to a Python model of the tree (never by
running anything), in the format of ``fs_state.py``. Every operation also has a bash command (the oracle's).
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

WORDS = ("alpha", "amber", "anchor", "apple", "birch", "bold", "breeze", "cedar", "cobalt", "copper", "delta",
         "ember", "falcon", "fern", "glacier", "granite", "harbor", "hazel", "indigo", "island", "jasper",
         "juniper", "kestrel", "lantern", "maple", "meadow", "nickel", "north", "onyx", "orbit", "pebble",
         "pine", "quartz", "raven", "river", "saffron", "signal", "summit", "thistle", "timber", "umber",
         "valley", "willow", "yarrow", "zephyr")
STEMS = ("intro", "summary", "plan", "budget", "meeting", "ideas", "review", "roadmap", "outline", "minutes",
         "draft", "goals", "risks", "notes")
LOG_LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")
LITTER = (".tmp", ".bak", ".swp")
State = dict[str, tuple[Any, ...]]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Workspace:
    """A model of the workspace: files by relative path, folders (empty ones included), archives."""

    files: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    archives: dict[str, dict[str, bytes]] = field(default_factory=dict)

    def add(self, path: str, data: bytes) -> None:
        self.files[path] = data
        self._parents(path)

    def _parents(self, path: str) -> None:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.dirs.add("/".join(parts[:i]))

    def mkdir(self, path: str) -> None:
        self._parents(path + "/x")

    def under(self, folder: str) -> list[str]:
        return sorted(p for p in self.files if p.startswith(folder + "/"))

    def state(self) -> State:
        """The state as ``fs_state.py`` reports it."""
        out: State = {d: ("dir",) for d in self.dirs}
        out.update({p: ("file", sha(b)) for p, b in self.files.items()})
        for path, members in self.archives.items():
            out[path] = ("tar.gz", tuple(sorted((m, sha(b)) for m, b in members.items())))
        return out


@dataclass(frozen=True)
class Layout:
    """The seed-drawn names of each role."""

    text_dir: str
    data_dir: str
    config: str
    logs_dir: str
    scratch_dir: str
    word_list: str
    changelog: str
    new_dir: str


@dataclass(frozen=True)
class Op:
    """One operation of a task: what the agent is told, and a bash command that does it."""

    kind: str
    text: str
    command: str


def _n(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _sample(rng: np.random.Generator, options: tuple[str, ...], k: int) -> list[str]:
    return [options[int(i)] for i in rng.choice(len(options), size=k, replace=False)]


def _sentence(rng: np.random.Generator) -> str:
    words = [_pick(rng, WORDS) for _ in range(_n(rng, 4, 9))]
    return " ".join(words).capitalize() + "."


def _text(rng: np.random.Generator, lines: int) -> bytes:
    return "".join(_sentence(rng) + "\n" for _ in range(lines)).encode()


def _csv(rng: np.random.Generator) -> bytes:
    rows = [f"{i},{_pick(rng, WORDS)},{_n(rng, 1, 500)}" for i in range(1, _n(rng, 3, 7))]
    return ("id,name,qty\n" + "".join(r + "\n" for r in rows)).encode()


def _log(rng: np.random.Generator) -> bytes:
    day = _n(rng, 1, 28)
    lines = [f"2024-03-{day:02d} {_n(rng, 0, 23):02d}:{_n(rng, 0, 59):02d}:{_n(rng, 0, 59):02d} "
             f"{_pick(rng, LOG_LEVELS)} {_sentence(rng)}" for _ in range(_n(rng, 2, 6))]
    return "".join(line + "\n" for line in lines).encode()


CONFIG: dict[str, dict[str, tuple[str, ...]]] = {
    "server": {"host": ("127.0.0.1", "0.0.0.0"), "port": ("8000", "8080", "5000", "9090"),
               "workers": ("2", "4", "8")},
    "database": {"name": ("shop", "inventory", "ledger"), "pool_size": ("5", "10", "20"),
                 "timeout": ("15", "30", "60")},
    "logging": {"level": ("info", "warning", "debug", "error"), "rotate": ("daily", "weekly")},
}


def _config(rng: np.random.Generator) -> bytes:
    out = []
    for section, keys in CONFIG.items():
        out.append(f"[{section}]")
        out.extend(f"{key} = {_pick(rng, values)}" for key, values in keys.items())
        out.append("")
    return "\n".join(out).encode()


def make_layout(rng: np.random.Generator) -> Layout:
    """Role names; the pools are disjoint, so no two roles share a path."""
    return Layout(text_dir=_pick(rng, ("docs", "notes", "drafts", "papers")),
                  data_dir=_pick(rng, ("data", "exports", "datasets")),
                  config=_pick(rng, ("config/app.ini", "etc/service.ini", "settings/server.ini")),
                  logs_dir=_pick(rng, ("logs", "logfiles", "audit")),
                  scratch_dir=_pick(rng, ("tmp", "cache", "build", "scratch")),
                  word_list=_pick(rng, ("names.txt", "words.txt", "tags.txt")),
                  changelog=_pick(rng, ("CHANGELOG.txt", "HISTORY.txt", "journal.txt")),
                  new_dir=_pick(rng, ("reports", "todo", "summaries", "out")))


def make_tree(rng: np.random.Generator, lay: Layout) -> Workspace:
    """The initial tree: a few files per role, content drawn from ``rng``."""
    ws = Workspace()
    stems = _sample(rng, STEMS, 8)
    for stem in stems[: _n(rng, 2, 5)]:
        ws.add(f"{lay.text_dir}/{stem}.txt", _text(rng, _n(rng, 1, 4)))
    for stem in stems[6:8]:
        ws.add(f"{lay.text_dir}/{stem}.md", _text(rng, _n(rng, 1, 3)))
    for name in _sample(rng, ("sales", "stock", "users", "orders", "prices"), _n(rng, 2, 4)):
        ws.add(f"{lay.data_dir}/{name}.csv", _csv(rng))
    ws.add(f"{lay.data_dir}/meta.json", f'{{"version": {_n(rng, 1, 9)}, "owner": "{_pick(rng, WORDS)}"}}\n'
           .encode())
    ws.add(lay.config, _config(rng))
    for name in _sample(rng, ("app", "access", "error", "worker"), _n(rng, 2, 3)):
        ws.add(f"{lay.logs_dir}/{name}.log", _log(rng))
    ws.add(f"{lay.logs_dir}/old/{_pick(rng, ('app', 'access'))}.1.log", _log(rng))
    for folder in (lay.scratch_dir, f"{lay.scratch_dir}/{_pick(rng, ('objs', 'parts', 'stage'))}"):
        for i, stem in enumerate(_sample(rng, STEMS, 4)):
            suffix = _pick(rng, LITTER if i == 0 else (*LITTER, ".o", ".txt", ".dat"))
            ws.add(f"{folder}/{stem}{suffix}", _text(rng, 1))
        ws.add(f"{folder}/keep.dat", _text(rng, 1))
    words = [_pick(rng, WORDS) for _ in range(_n(rng, 8, 16))]
    words += [words[int(i)] for i in rng.choice(len(words), size=_n(rng, 2, 4))]
    ws.add(lay.word_list, "".join(w + "\n" for w in rng.permutation(words)).encode())
    ws.add(lay.changelog, "".join(f"v0.{i}: {_sentence(rng)}\n" for i in range(1, _n(rng, 2, 5))).encode())
    ws.add("README.md", b"# Project\n\n" + _text(rng, 2))
    return ws


# ------------------------------------------------------------------------------------------ operations

Builder = Callable[[np.random.Generator, Layout, Workspace], Op]


def op_create(rng: np.random.Generator, lay: Layout, ws: Workspace) -> Op:
    path = f"{lay.new_dir}/{_pick(rng, ('summary', 'todo', 'status', 'plan'))}.txt"
    lines = [_sentence(rng) for _ in range(_n(rng, 1, 3))]
    ws.add(path, "".join(line + "\n" for line in lines).encode())
    shown = "\n".join(f"    {line}" for line in lines)
    return Op("create", f"Create the file {path} (and its folder) containing exactly these lines, each "
              f"ending with a newline:\n{shown}",
              f"mkdir -p {lay.new_dir} && printf '%s\\n' {' '.join(shlex.quote(x) for x in lines)} > {path}")


def op_rename_ext(rng: np.random.Generator, lay: Layout, ws: Workspace) -> Op:
    for path in [p for p in ws.under(lay.text_dir) if p.endswith(".txt")]:
        ws.add(path[: -len(".txt")] + ".md", ws.files.pop(path))
    return Op("rename_ext", f"In {lay.text_dir}/, rename every .txt file to .md, keeping its base name "
              f"(a.txt becomes a.md).",
              f'for f in {lay.text_dir}/*.txt; do mv -- "$f" "${{f%.txt}}.md"; done')


def op_move_glob(rng: np.random.Generator, lay: Layout, ws: Workspace) -> Op:
    sub = f"{lay.data_dir}/{_pick(rng, ('csv', 'archive', 'raw', 'tables'))}"
    for path in [p for p in ws.under(lay.data_dir) if p.endswith(".csv")]:
        ws.add(f"{sub}/{path.rsplit('/', 1)[1]}", ws.files.pop(path))
    return Op("move_glob", f"Move every .csv file in {lay.data_dir}/ into a new folder {sub}/ (same file "
              f"names).", f"mkdir -p {sub} && mv {lay.data_dir}/*.csv {sub}/")


def op_delete_match(rng: np.random.Generator, lay: Layout, ws: Workspace) -> Op:
    present = tuple(s for s in LITTER if any(p.endswith(s) for p in ws.under(lay.scratch_dir)))
    suffixes = sorted(_sample(rng, present, min(len(present), _n(rng, 1, 2))))
    for path in ws.under(lay.scratch_dir):
        if path.endswith(tuple(suffixes)):
            del ws.files[path]
    names = " or ".join(suffixes)
    test = " -o ".join(f"-name '*{s}'" for s in suffixes)
    return Op("delete_match", f"Delete every file whose name ends with {names} anywhere under "
              f"{lay.scratch_dir}/ (subfolders included). Keep every other file and all folders.",
              f"find {lay.scratch_dir} -type f \\( {test} \\) -delete")


def op_set_config(rng: np.random.Generator, lay: Layout, ws: Workspace) -> Op:
    section = _pick(rng, tuple(CONFIG))
    key = _pick(rng, tuple(CONFIG[section]))
    lines = ws.files[lay.config].decode().split("\n")
    old = next(line for line in lines if line.startswith(f"{key} = "))
    value = _pick(rng, tuple(v for v in CONFIG[section][key] if f"{key} = {v}" != old))
    new = f"{key} = {value}"
    ws.add(lay.config, "\n".join(new if line == old else line for line in lines).encode())
    return Op("set_config", f"In {lay.config}, set {key} in section [{section}] to {value}, so that its line "
              f"reads exactly `{new}`; leave every other line as it is.",
              f"sed -i {shlex.quote(f's|^{key} = .*$|{new}|')} {lay.config}")


def op_append_line(rng: np.random.Generator, lay: Layout, ws: Workspace) -> Op:
    line = f"v1.{_n(rng, 0, 9)}: {_sentence(rng)}"
    ws.add(lay.changelog, ws.files[lay.changelog] + (line + "\n").encode())
    return Op("append_line", f"Append the line `{line}` (with a final newline) to the end of "
              f"{lay.changelog}.",
              f"printf '%s\\n' {shlex.quote(line)} >> {lay.changelog}")


def op_archive_dir(rng: np.random.Generator, lay: Layout, ws: Workspace) -> Op:
    folder, archive = lay.logs_dir, f"{lay.logs_dir}.tar.gz"
    ws.archives[archive] = {p: ws.files.pop(p) for p in ws.under(folder)}
    ws.dirs = {d for d in ws.dirs if d != folder and not d.startswith(folder + "/")}
    return Op("archive_dir", f"Pack the folder {folder}/ (with its subfolders) into a gzip-compressed tar "
              f"archive {archive} in the workspace root, storing members as {folder}/..., then delete the "
              f"folder {folder}/.", f"tar -czf {archive} {folder} && rm -r {folder}")


def op_sort_unique(rng: np.random.Generator, lay: Layout, ws: Workspace) -> Op:
    words = sorted(set(ws.files[lay.word_list].decode().split()))
    ws.add(lay.word_list, "".join(w + "\n" for w in words).encode())
    return Op("sort_unique", f"Sort the lines of {lay.word_list} alphabetically and remove duplicate lines, "
              f"in place (one word per line).", f"LC_ALL=C sort -u -o {lay.word_list} {lay.word_list}")


OPS: Mapping[str, Builder] = {"create": op_create, "rename_ext": op_rename_ext, "move_glob": op_move_glob,
                              "delete_match": op_delete_match, "set_config": op_set_config,
                              "append_line": op_append_line, "archive_dir": op_archive_dir,
                              "sort_unique": op_sort_unique}


def make_ops(rng: np.random.Generator, lay: Layout, ws: Workspace, count: int) -> tuple[Op, ...]:
    """``count`` operations of distinct kinds, applied to ``ws`` (which becomes the expected tree)."""
    kinds = _sample(rng, tuple(OPS), count)
    return tuple(OPS[kind](rng, lay, ws) for kind in kinds)
