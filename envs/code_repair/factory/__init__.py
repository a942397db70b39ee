"""Task factory: mine SWE-bench-style code-repair tasks from real PyPI projects (``envfarm tasks mine``)."""
