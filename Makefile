# The two commands of the README. Both do all set-up first (scripts/bootstrap.sh).
.PHONY: lab test setup bench

# The Enroot image (scripts/build-container-image.sh, no registry here) goes to the shared
# storage, where `srun --container-image=/shared/images/busybox.sqsh` finds it on every node.
lab: setup          ## bring up the lab cluster: `pulumi up` on the lab stack
	.venv/bin/railyard up --stack lab --yes
	podman exec railyard-lab-login1 mkdir -p /shared/images
	podman cp /var/cache/railyard/images/busybox.sqsh railyard-lab-login1:/shared/images/busybox.sqsh

# Two workers, a file each at a time (--dist loadfile; the molecule scenarios by lane,
# tests/conftest.py, which also sends the longest out first: --no-loadscope-reorder keeps
# that order, where xdist would sort the files by their number of tests): the e2e on the lab
# and the molecule lanes run side by side; the rest fills in. A third worker on 2 cores ran
# the lab and both lanes at once and made each so slow that molecule/kubernetes passed its
# 1800 s limit.
test: setup         ## every test, as CI runs it (closing table: where the time went)
	RAILYARD_SETUP_SECONDS=$$(cat .railyard/setup-seconds 2>/dev/null) .venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder

setup:              ## its wall time goes to the test run's closing table
	@mkdir -p .railyard; t0=$$(date +%s); scripts/bootstrap.sh; \
	echo $$(( $$(date +%s) - t0 )) > .railyard/setup-seconds

bench: setup        ## benchmarks (figures, not pass/fail)
	.venv/bin/python benchmarks/compile_bench.py
