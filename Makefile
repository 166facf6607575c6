# mkpy: `make run` and `make test` set everything up on a fresh Debian/Ubuntu machine.
PYTHON ?= /usr/bin/python3
PYTEST_ARGS ?= -q

.PHONY: deps build run test bench clean

deps:
	@sh scripts/install-deps.sh

build: deps
	$(PYTHON) setup.py -q build_ext --inplace

run: build
	PYTHONPATH=. $(PYTHON) examples/quickstart.py

test: build
	PYTHONPATH=. $(PYTHON) -m pytest $(PYTEST_ARGS) tests

clean:
	rm -rf build mkpy/*.so mkpy/__pycache__ tests/__pycache__ *.egg-info
