# Quickstart: `make bench` (allreduce sweep on 4 local ranks vs MPI_Allreduce) and `make test`.
# Each target sets up .venv on first use (scripts/setup.sh).
VENV := .venv
STAMP := $(VENV)/.installed
NP ?= 4

.PHONY: bench test lint setup clean

$(STAMP): pyproject.toml CMakeLists.txt $(wildcard csrc/*.cpp csrc/*.h) scripts/setup.sh
	./scripts/setup.sh
	touch $(STAMP)

setup: $(STAMP)

bench: $(STAMP)
	$(VENV)/bin/compcoll bench allreduce -np $(NP) -b 1K -e 64M -f 4 \
		--json bench/results/allreduce_shm_np$(NP).json --plot bench/results/allreduce_shm_np$(NP).png

lint: $(STAMP)
	$(VENV)/bin/ruff check collectives compressors tests bench

test: $(STAMP) lint
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests

clean:
	rm -rf build $(VENV) _compcoll*.so
