# kiln: the two commands that matter are `make serve` and `make test` (README.md).
#
#   make test     install deps, build the release preset (-O2 -g1, asserts on), run every CTest
#                 (the fuzz targets' corpus replays included: fuzz_replay_*)
#   make bench    install deps, build release, run tests/bench/run.sh
#   make fuzz-numerics N=...   the differential test with N fresh random cases per backend (CPU, INTERP, CL);
#                 failures are shrunk and written to tests/differential/regressions/
#   make fuzz-net N=...        network fuzzing of a live kilnd: N malformed HTTP/1.1 and HTTP/2 cases
#                 (tests/fuzz/net; SEED=... repeats a campaign); findings in build/netfuzz-findings/
#   make serve    install deps, build release, start kilnd with training on: the repository is a
#                 copy of models/ in SERVE_DIR/models (training publishes there), jobs and
#                 checkpoints in SERVE_DIR/data, datasets under DATASET_ROOTS (SERVE_ARGS adds flags)
#   make asan     the test suite under ASan + UBSan (preset asan)
#   make tsan     the test suite under TSan (preset tsan)
#   make fuzz     build the fuzz preset (clang, libFuzzer), fuzz every parser for FUZZ_SECONDS each
#   make debug    the test suite in the debug preset
#   make format   clang-format -i over tracked *.h / *.cc
#   make tidy     clang-tidy (allowlist in .clang-tidy) over tracked *.cc, using the release build
#   make deps     deploy/install-deps.sh only
#   make clean    remove build/ (.venv and SERVE_DIR stay; `make distclean` removes them too)
#
# JOBS (default 2: CI has 2 cores) sets build and test parallelism; CTEST_ARGS is passed to the
# release ctest (e.g. make test CTEST_ARGS='-L unit -R uop'). make fuzz: FUZZ_SECONDS (default 60)
# per target, FUZZ_JOBS targets at a time (default 1), FUZZ_TARGETS (default all: checkpoint graph grpc_infer idx model_config rest_infer
# safetensors uop_text).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

JOBS ?= 2
CTEST_ARGS ?=
# make serve's state (kept across runs; `make distclean` removes it) and its dataset roots.
SERVE_DIR ?= .kiln
DATASET_ROOTS ?= /usr/share/datasets
SERVE_ARGS ?=
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_TARGETS ?=

.PHONY: test bench fuzz fuzz-numerics fuzz-net serve asan tsan debug deps build-release build-fuzz format tidy clean distclean

deps:
	@bash deploy/install-deps.sh

# configure + build one preset: $(call build,PRESET)
define build
	@echo "==== configure + build: preset $(1) ===="
	cmake --preset $(1)
	cmake --build --preset $(1) -j $(JOBS)
endef

# run the suite of one preset with ctest args $(3), keep a log, print a final summary; fails if
# anything failed.
define run_tests
	@echo "==== test: preset $(1) ===="
	@log=build/$(1)/ctest.log; rc=0; \
	ctest --preset $(1) --output-on-failure -j $(JOBS) $(3) 2>&1 | tee "$$log" || rc=$$?; \
	echo; echo "==== make $(2) summary (preset $(1)) ===="; \
	grep -E '^[0-9]+% tests passed' "$$log" || echo "ctest printed no result line"; \
	if grep -q '^The following tests FAILED' "$$log"; then sed -n '/^The following tests FAILED/,$$p' "$$log"; fi; \
	if [[ $$rc -ne 0 ]]; then echo "make $(2): FAILED (ctest exit $$rc)"; exit $$rc; fi; \
	echo "make $(2): OK"
endef

build-release: deps
	$(call build,release)

build-fuzz: deps
	$(call build,fuzz)

test: build-release
	$(call run_tests,release,test,$(CTEST_ARGS))

fuzz: build-fuzz
	@FUZZ_JOBS=$(FUZZ_JOBS) bash tests/fuzz/run.sh $(FUZZ_SECONDS) build/fuzz/tests/fuzz $(FUZZ_TARGETS)

bench: build-release
	@bash tests/bench/run.sh

N ?= 1000
fuzz-numerics: build-release
	.venv/bin/python tests/differential/run_differential.py --binary build/release/tests/differential/diff_eval \
	  --device CPU,INTERP,CL,CPU+jit,INTERP+jit --cases $(N) --fresh --write-failures tests/differential/regressions

SEED ?=
fuzz-net: build-release
	.venv/bin/python tests/fuzz/net/netfuzz.py --kilnd build/release/server/main/kilnd --models models \
	  --cases $(N) $(if $(SEED),--seed $(SEED)) --findings build/netfuzz-findings --json build/netfuzz-summary.json

# tests/docs/test_readme_commands.py runs this recipe (`make -n -o build-release serve`) and the
# README's runnable blocks against it: keep kilnd the recipe's last line.
serve: build-release
	@echo "make serve: kilnd, KServe v2 HTTP on :8000 and gRPC on :8001, training on; repository $(SERVE_DIR)/models (Ctrl-C stops it)"
	mkdir -p $(SERVE_DIR)/models $(SERVE_DIR)/data && cp -R -u models/. $(SERVE_DIR)/models/
	mkdir -p $(SERVE_DIR)/models/smollm2/1 && cp -u deploy/llm/smollm2/config.pbtxt $(SERVE_DIR)/models/smollm2/
	cp -u .venv/share/kiln/SmolLM2-135M-Instruct.Q4_1.gguf $(SERVE_DIR)/models/smollm2/1/model.gguf
	./build/release/server/main/kilnd --model-repository=$(SERVE_DIR)/models --data-dir=$(SERVE_DIR)/data --dataset-roots=$(DATASET_ROOTS) $(SERVE_ARGS)

debug: deps
	$(call build,debug)
	$(call run_tests,debug,debug,$(CTEST_ARGS))

asan: deps
	$(call build,asan)
	$(call run_tests,asan,asan,$(CTEST_ARGS))

tsan: deps
	$(call build,tsan)
	$(call run_tests,tsan,tsan,$(CTEST_ARGS))

format:
	git ls-files -z -- '*.h' '*.cc' | xargs -0 -r clang-format -i

tidy: build-release
	git ls-files -z -- '*.cc' | xargs -0 -r clang-tidy -p build/release --quiet

clean:
	rm -rf build

distclean: clean
	rm -rf .venv $(SERVE_DIR)
