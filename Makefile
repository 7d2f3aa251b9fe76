# Weave: top-level commands. `make demo` and `make test` work on a fresh Debian 12 machine:
# they install the Debian packages they need first (make deps).
SHELL := /bin/bash
BUILD ?= build
SANITIZE ?= 0
JOBS ?= $(shell nproc)
ifeq ($(SANITIZE),1)
BUILD := build-asan
CMAKE_EXTRA := -DWEAVE_SANITIZE=ON
endif
DEBS := cmake ninja-build g++ libabsl-dev nlohmann-json3-dev libcli11-dev googletest libgtest-dev \
        libgmock-dev libbenchmark-dev libopenblas-dev llvm-14-tools clang-14 libclang-rt-14-dev python3
LIT := python3 /usr/lib/llvm-14/build/utils/lit/lit.py
FUZZ_SECONDS ?= 10

.PHONY: deps build test unit lit fuzz fuzz-smoke demo bench clean

deps:
	@missing=""; for p in $(DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; fi

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_EXTRA)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

lit: build
	WEAVE_BUILD=$(abspath $(BUILD)) $(LIT) -sv tests/lit

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	WEAVE_BUILD=$(abspath $(BUILD)) $(LIT) -s tests/lit
	$(MAKE) --no-print-directory fuzz-smoke
	@echo "make test: all suites passed"

# libFuzzer target for the parser, built with clang-14.
fuzz-build: deps
	cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build-fuzz -j $(JOBS)

fuzz-smoke: fuzz-build
	@mkdir -p build-fuzz/corpus && cp -f tests/lit/*.hlo build-fuzz/corpus/ 2>/dev/null; \
	  build-fuzz/parser_fuzzer -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=10 \
	  build-fuzz/corpus ../shared/examples 2>&1 | tail -3

fuzz: fuzz-build
	build-fuzz/parser_fuzzer -max_total_time=$${FUZZ_SECONDS:-300} build-fuzz/corpus ../shared/examples

demo: build
	$(BUILD)/weave demo

bench: build
	cmake --build $(BUILD) --target benches -j $(JOBS)
	@for b in $(BUILD)/bench/*_bench; do echo "== $$b"; $$b; done

clean:
	rm -rf build build-asan build-fuzz
