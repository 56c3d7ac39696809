# The two commands of the README. Both do all set-up first (scripts/bootstrap.sh).
.PHONY: lab test setup bench

# The Enroot image (scripts/build-container-image.sh, no registry here) goes to the shared
# storage, where `srun --container-image=/shared/images/busybox.sqsh` finds it on every node.
lab: setup          ## bring up the lab cluster: `pulumi up` on the lab stack
	.venv/bin/railyard up --stack lab --yes
	podman exec railyard-lab-login1 mkdir -p /shared/images
	podman cp /var/cache/railyard/images/busybox.sqsh railyard-lab-login1:/shared/images/busybox.sqsh

# Two workers, a file each at a time (--dist loadfile): the e2e on the lab and the molecule
# scenarios run side by side (tests/conftest.py sends them out first); the rest fills in.
test: setup         ## every test, as CI runs it (closing table: where the time went)
	RAILYARD_SETUP_SECONDS=$$(cat .railyard/setup-seconds 2>/dev/null) .venv/bin/python -m pytest -n 2 --dist loadfile

setup:              ## its wall time goes to the test run's closing table
	@mkdir -p .railyard; t0=$$(date +%s); scripts/bootstrap.sh; \
	echo $$(( $$(date +%s) - t0 )) > .railyard/setup-seconds

bench: setup        ## benchmarks (figures, not pass/fail)
	.venv/bin/python benchmarks/compile_bench.py
