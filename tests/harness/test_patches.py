"""Reading unified diffs: touched paths, hunk bodies, renames, symlinks, unsafe paths."""

from __future__ import annotations

import re

from envfarm.harness import Instance
from envfarm.harness.patches import parse, touched_paths, unsafe_paths


def test_touched_paths_match_git_headers_on_every_lite_patch(lite: list[Instance]) -> None:
    for inst in lite:
        for patch in (inst.patch, inst.test_patch):
            headers = {
                p for m in re.finditer(r"^diff --git a/(\S+) b/(\S+)", patch, re.M) for p in m.groups()
            }
            assert set(touched_paths(patch)) == headers, inst.instance_id


def test_hunk_bodies_are_counted_not_guessed() -> None:
    patch = (
        "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1,2 @@\n--- looks like a header\n+new\n same\n"
        "--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import pytest\n"
    )
    first, second = parse(patch)
    assert (first.old_path, first.new_path) == ("notes.txt", "notes.txt")
    assert first.removed_lines == ("-- looks like a header",) and first.added_lines == ("new",)
    assert second.created and second.new_path == "conftest.py" and second.added_lines == ("import pytest",)


def test_renames_deletions_and_symlinks() -> None:
    patch = (
        "diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n"
        "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n+++ /dev/null\n"
        "@@ -1 +0,0 @@\n-x = 1\n"
        "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+tests\n"
        "\\ No newline at end of file\n"
    )
    rename, deletion, link = parse(patch)
    assert rename.paths == ("old.py", "new.py")
    assert deletion.old_path == "gone.py" and deletion.new_path is None
    assert link.symlink and link.created
    assert touched_paths(patch) == ["old.py", "new.py", "gone.py", "link"]


def test_unsafe_paths() -> None:
    def one(path: str) -> str:
        return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"

    assert unsafe_paths(one(".git/config")) == [".git/config"]
    assert unsafe_paths(one("sub/.git/hooks/pre-commit")) == ["sub/.git/hooks/pre-commit"]
    assert unsafe_paths(one("../outside.py")) == ["../outside.py"]
    assert unsafe_paths("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n") == ["/etc/passwd"]
    assert unsafe_paths(one("src/.gitignore") + one("a/../b.py")) == []
