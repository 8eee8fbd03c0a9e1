# cyphal-servo: two commands matter — `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PACKAGES := $(VENV)/.packages
PHASE  := bash .ci/phase
# pytest-xdist workers: 4 on 2 cores, one of them running the timing scenarios one at a time (tests/conftest.py
# BUS_SCENARIOS and LIGHT_BUS_SCENARIOS, real-time where permitted), the others the tests that only compute, the other
# scenarios (LATE_BUS_SCENARIOS) and the packaging tests once the warm-up is done, and the CiA 402 scenarios
# (CANOPEN_SCENARIOS, real-time) once the computing tests are done (the groups are handed out in
# the collection's order, hence --no-loadscope-reorder); each worker runs on a network namespace of its own
# (tests/isolation.py), which needs root: serial otherwise.
WORKERS ?= $(shell [ "$$(id -u)" = 0 ] && echo 4 || echo 0)

.PHONY: demo test lint bench clean dsdl-env hanoi install packages

install packages: $(PACKAGES)
# uv installs the same resolution as pip in a fraction of the time (measured on a fresh clone: 7 s against pip's 28 s;
# where uv cannot be had or fails, no index it can reach, pip does it). uv compiles no bytecode, and this machine (as
# many container images) sets PYTHONDONTWRITEBYTECODE: without bytecode every process compiled its imports from
# source. The venv is this project's own, so its recipes write the bytecode of what they import as they first import
# it (a third of the venv's modules; compiling all of them ahead cost a minute of CPU).
unexport PYTHONDONTWRITEBYTECODE
$(PACKAGES): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	{ $(BIN)/python -m pip install -q uv && $(BIN)/uv pip install -q --python $(BIN)/python -e '.[test]'; } \
	  || { echo "uv did not install; pip does" >&2 && $(BIN)/python -m pip install -q --upgrade pip \
	       && $(BIN)/python -m pip install -q -e '.[test]'; }
	touch $(PACKAGES)

## Start a servo node on loopback UDP with the embedded simulated drive; prints how to command it with yakut.
demo: $(PACKAGES)
	$(BIN)/servo-node demo

## Lint, type-check and run the whole test suite.
## The warm-up (numba's kernels), the DSDL with one collection of the tests (which writes the bytecode of what they
## import, once, before the workers import it together) and the lint start side by side, all at the niceness they
## were given (a user's other work shares the cores fairly with them). pytest starts once the DSDL and that bytecode
## are there, while the lint goes on and the warm-up compiles its last and longest part (the control loop's kernels):
## the tests that do not run them go first, the others wait for the warm-up's status (tests/conftest.py
## WITHOUT_LOOP_KERNELS). The timing scenarios run their processes under SCHED_FIFO where permitted (tests/procs.py),
## as a deployment runs a machine's motion processes. The lint's and the warm-up's output follow pytest's; any of the
## three failing fails the target. Every test's time is in .venv/pytest.xml (JUnit XML).
test: $(PACKAGES)
	rm -f $(VENV)/warmup.status; \
	  { $(PHASE) warm-up $(BIN)/servo-node warmup >$(VENV)/warmup.log 2>&1; \
	    echo $$? >$(VENV)/warmup.status.new; mv $(VENV)/warmup.status.new $(VENV)/warmup.status; } & warm=$$!; \
	  $(PHASE) lint $(MAKE) --no-print-directory lint >$(VENV)/lint.log 2>&1 & lint=$$!; \
	  $(PHASE) dsdl+bytecode sh -c '$(BIN)/servo-node dsdl-env >/dev/null \
	    && $(BIN)/python -m pytest -q --collect-only -p no:cacheprovider >/dev/null'; \
	  tested=$$?; \
	  if [ $$tested = 0 ]; then \
	    SERVO_WARMUP_STATUS=$(VENV)/warmup.status $(PHASE) pytest \
	      $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadgroup --no-loadscope-reorder --durations=15 \
	        --junitxml=$(VENV)/pytest.xml; tested=$$?; \
	  fi; \
	  wait $$lint; linted=$$?; wait $$warm; cat $(VENV)/lint.log $(VENV)/warmup.log; \
	  [ $$linted = 0 ] || echo "make test: the lint failed (above)" >&2; \
	  [ "$$(cat $(VENV)/warmup.status)" = 0 ] && [ $$linted = 0 ] && [ $$tested = 0 ]

lint: $(PACKAGES)
	$(BIN)/ruff check servo_node sim_plant sim_plant_node cyphal_common tests bench examples
	$(BIN)/mypy

## Speed tables against the peer (Ruckig) and real time.
bench: $(PACKAGES)
	$(BIN)/python bench/otg.py
	$(BIN)/python bench/plant.py
	$(BIN)/python bench/loop.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/load.py

## Tower of Hanoi with five servo nodes (examples/hanoi, docs/hanoi.md): BOXES=3; PLANT=arm puts base, shoulder and
## elbow on the coupled arm plant (sim-plant --arm), PLANT=joints (default) keeps independent joints; writes hanoi.png.
hanoi: $(PACKAGES)
	$(BIN)/python -m examples.hanoi --boxes $(or $(BOXES),3) --plant $(or $(PLANT),joints) --figure hanoi.png

## Print the exports that make yakut use this project's DSDL.
dsdl-env: $(PACKAGES)
	@$(BIN)/servo-node dsdl-env

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

## The compose bench for real: build the images, start three servo axes with their drives, the coordinator and
## a tester, check them from inside their network, tear everything down (root, or a running Docker engine).
.PHONY: compose-test
compose-test: $(PACKAGES)
	PYTHON=$(BIN)/python bash docker/compose-test.sh
