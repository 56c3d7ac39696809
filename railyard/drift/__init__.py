"""Drift: where the running cluster no longer matches the spec, and what restores it.

Pure core, thin edges: :func:`compare` judges an :class:`Observed` against the plan;
:func:`~railyard.drift.collect.collect` (I/O) fills one; renderers print the report.

    observed = collect(plan, ("nodes", "files", "slurm"))
    report = compare(plan, observed)
    sys.exit(report.exit_code)

Modules: ``model`` (Finding, DriftReport, exit codes), ``observed`` (the per-layer
observations), ``slurm`` (scontrol parsers), ``files`` (check-mode events), ``compare``,
``collect`` (runners and collectors), ``render`` (table, JSON), ``cli``.
"""

from railyard.drift.compare import compare
from railyard.drift.model import LAYERS, CheckError, DriftReport, Finding
from railyard.drift.observed import Observed

__all__ = ["LAYERS", "CheckError", "DriftReport", "Finding", "Observed", "compare"]
