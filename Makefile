# The two commands of the README. Both do all set-up first (scripts/bootstrap.sh).
.PHONY: lab test setup bench

lab: setup          ## bring up the lab cluster: `pulumi up` on the lab stack
	.venv/bin/railyard up --stack lab --yes

test: setup         ## every test, as CI runs it
	.venv/bin/python -m pytest

setup:
	scripts/bootstrap.sh

bench: setup        ## benchmarks (figures, not pass/fail)
	.venv/bin/python benchmarks/compile_bench.py
