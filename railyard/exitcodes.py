"""Exit codes, defined once, as terraform's `plan -detailed-exitcode` uses them."""

OK = 0  # valid / no drift
ERROR = 1  # invalid spec, or the command failed
DRIFT = 2  # the running cluster differs from the spec
