"""Exit codes, defined once, as terraform's `plan -detailed-exitcode` uses them."""

OK = 0  # valid / no drift
ERROR = 1  # invalid spec, or the command failed
DRIFT = 2  # the running cluster differs from the spec
# A bug in railyard, not a problem with the spec or the cluster: sysexits.h EX_SOFTWARE,
# far from 0-2 so no script reads it as "invalid" or "drift".
INTERNAL = 70
