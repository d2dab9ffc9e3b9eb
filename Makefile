# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,tensorboard,box2d,imitation,llm,multiagent,distributed,wandb,mlflow

.PHONY: install demo test test-fast test-expensive lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/python -m payoff.demo

test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=25

test-expensive: install
	$(BIN)/python -m pytest -q -m expensive

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

lint: install
	$(BIN)/ruff check payoff tests benchmarks
	$(BIN)/ruff format --check payoff tests benchmarks
	$(BIN)/lint-imports --no-cache  # the layers of docs/architecture.md (pyproject.toml)

clean:
	rm -rf $(VENV) runs .pytest_cache
