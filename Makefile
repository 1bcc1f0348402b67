# Quickstart: `make bench` (allreduce sweep on 4 local ranks vs MPI_Allreduce, then compressed
# allreduce across 4 emulated hosts at 1 Gbit/s, or the cost model's forecast of it where hosts
# cannot be emulated) and `make test`.
# Each target sets up .venv on first use (scripts/setup.sh): `make bench` what running needs,
# `make test` also the test tools and NVRTC (for the CUDA compile tests).
VENV := .venv
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
SETUP_DEPS := pyproject.toml CMakeLists.txt $(wildcard csrc/*.cpp csrc/*.h) scripts/setup.sh
NP ?= 4
# The emulated hosts' link for the compressed part of `make bench`.
LINK ?= 1gbit
# Your runs go here (git-ignored); bench/results holds the curated, committed results.
RESULTS ?= compcoll-results

.PHONY: bench test lint setup clean sanitize docs

$(STAMP): $(SETUP_DEPS)
	./scripts/setup.sh main
	touch $(STAMP)

$(TEST_STAMP): $(SETUP_DEPS)
	./scripts/setup.sh test
	touch $(STAMP) $(TEST_STAMP)

setup: $(STAMP)

bench: $(STAMP)
	mkdir -p $(RESULTS)
	$(VENV)/bin/compcoll bench allreduce -np $(NP) -b 1K -e 64M -f 4 \
		--json $(RESULTS)/allreduce_shm_np$(NP).json --plot $(RESULTS)/allreduce_shm_np$(NP).png \
		--txt $(RESULTS)/allreduce_shm_np$(NP).txt
	$(VENV)/bin/python -m compcoll_bench.quickstart -np $(NP) --link $(LINK) --out $(RESULTS)

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check compcoll collectives compressors tests bench docs

docs: $(TEST_STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

# -p tests.progress: between pytest's dots, a line a minute (time, tests done, the test starting).
test: $(TEST_STAMP) lint
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider -p tests.progress --durations=20 tests

clean:
	rm -rf build $(VENV) _compcoll*.so docs/_build

# The kernels built with AddressSanitizer and UndefinedBehaviorSanitizer (misaligned loads,
# overflows, out-of-bounds access) into build/sanitize, then the kernel, wire-format and fuzz
# tests run against that build (libasan preloaded: the interpreter is not instrumented), with
# pytest's output capture off so that a sanitizer's report is not lost when it ends the process.
SAN_DIR := build/sanitize
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
SAN_TESTS := tests/compressors/test_kernels.py tests/test_reduce_kernels.py \
	tests/compressors/test_wire.py tests/compressors/test_fuzz.py
# libstdc++ is preloaded too: ASan's throw interceptor must find it at startup.
SAN_ENV = LD_PRELOAD="$$($(CXX) -print-file-name=libasan.so) $$($(CXX) \
	-print-file-name=libstdc++.so)" ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1
SAN_RUN = $(VENV)/bin/python scripts/sanitized_pytest.py $(SAN_DIR) -q -s -p no:cacheprovider

sanitize: $(TEST_STAMP)
	cmake -S . -B $(SAN_DIR) -DCMAKE_BUILD_TYPE=Release -DCOMPCOLL_NATIVE=OFF \
		-DPython_EXECUTABLE=$(abspath $(VENV))/bin/python -DCMAKE_CXX_COMPILER=$(CXX) \
		-DCOMPCOLL_SANITIZE="$(SAN_FLAGS)" > /dev/null
	cmake --build $(SAN_DIR) -j 2
	{ echo "# make sanitize ($(SAN_FLAGS)), $$(date -u)"; \
	  echo "# $(SAN_ENV) $(SAN_RUN) $(SAN_TESTS)" | tr -s '\t\\ ' ' '; \
	  $(SAN_ENV) $(SAN_RUN) $(SAN_TESTS) 2>&1; echo "exit status $$?"; } \
	  | tee bench/results/reliability/sanitize.txt
	grep -q "^exit status 0$$" bench/results/reliability/sanitize.txt
