"""Test and red-team support, shipped with envfarm but never part of grading.

What the tests, the benchmarks in ``bench/`` and red-teaming of a grader (in the spirit of an
``envfarm harness audit``) share, so that none of them reaches into another's folder:

- ``exploits`` and ``exploit_payloads``: a forgery suite, model patches that fix nothing yet try to be
  graded resolved (runner config and plugins, in-memory framework rewrites, forged output). Test data for
  graders: never apply one to a repository you care about.
- ``toyrepo``: a small repository in SWE-bench format (two bugs, FAIL_TO_PASS tests) with its rows,
  patches and environment spec, built in a temp folder.
- ``tiny_hf``: a byte-level BPE tokenizer trained on the spot and a random-init tiny Qwen2 built on it
  (needs the ``hf`` and ``train`` extras; nothing is downloaded).

The grading code (``envfarm.harness``), the envs, the sandboxes, the trainer and the farm never import this
package (tests/test_architecture.py checks it): a reward must not depend on the code that attacks it.
"""
