# `make demo` and `make test` are the two commands of the README; both run the
# idempotent `make setup` first (CI calls the same two through .ci/run).
.PHONY: setup test test-fast demo lint bench
setup:
	bash scripts/setup.sh

test: setup
	.venv/bin/ruff check .
	.venv/bin/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder --durations=25 tests

# the inner loop: ruff and the tests that start no trainer and take seconds each (tests/conftest.py's `slow` marks the
# others), a few minutes
test-fast: setup
	.venv/bin/ruff check .
	.venv/bin/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder -m "not slow" tests

demo: setup
	bash recipes/cpu_demo.sh

bench: setup
	.venv/bin/python benchmarks/advantage.py
