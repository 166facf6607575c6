#!/bin/sh
# MLX's python/tests and mlx-lm's tests, each run twice: on mkpy through the stand-in mode
# (`pytest -p mkpy.as_mlx`, mlx.nn/optimizers/utils from the `mlx` wheel without its core), and
# on MLX's CPU build (`mlx[cpu]`); then the per-file counts of both (docs/design.md, "The
# stand-in mode"). By hand, never part of `make test`; needs PyPI, and the HF Hub for the mlx-lm
# tests that download a model (without it they error in both runs).
#   sh scripts/mlx_suites.sh MLX_CHECKOUT MLX_LM_CHECKOUT WORK_DIR
# The checkouts are github.com/ml-explore/mlx and ml-explore/mlx-lm; WORK_DIR gets the two venvs
# and the reports. MLX's test_sdpa_long_masked_sequence is left out of mkpy's run: MLX's CPU
# build skips it ("too slow on CPU"), mkpy runs it (it plays the GPU) and it needs over 17 GB.
set -e
mlx=$(cd "$1" && pwd); lm=$(cd "$2" && pwd); mkdir -p "$3"; work=$(cd "$3" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
py="${PYTHON:-/usr/bin/python3}"
deps="transformers sentencepiece protobuf pyyaml jinja2 requests"
[ -x "$work/venv-mk/bin/python" ] || { "$py" -m venv --system-site-packages "$work/venv-mk" &&
    "$work/venv-mk/bin/pip" install -q mlx $deps; }
[ -x "$work/venv-ref/bin/python" ] || { "$py" -m venv --system-site-packages "$work/venv-ref" &&
    "$work/venv-ref/bin/pip" install -q "mlx[cpu]" $deps; }
n="-n ${JOBS:-2}"
cd "$mlx/python/tests"
PYTHONPATH="$root" "$work/venv-mk/bin/python" -m pytest -p mkpy.as_mlx -p no:cacheprovider -q $n . \
    -k "not test_sdpa_long_masked_sequence" --junitxml="$work/mlx-mkpy.xml" >"$work/mlx-mkpy.log" 2>&1 || true
"$work/venv-ref/bin/python" -m pytest -p no:cacheprovider -q $n . --junitxml="$work/mlx-ref.xml" \
    >"$work/mlx-ref.log" 2>&1 || true
cd "$lm"
# test_evaluate needs lm-eval (and torch): left out of both runs
PYTHONPATH="$root:." "$work/venv-mk/bin/python" -m pytest -p mkpy.as_mlx -p no:cacheprovider -q tests \
    --ignore=tests/test_evaluate.py --junitxml="$work/lm-mkpy.xml" >"$work/lm-mkpy.log" 2>&1 || true
PYTHONPATH=. "$work/venv-ref/bin/python" -m pytest -p no:cacheprovider -q tests \
    --ignore=tests/test_evaluate.py --junitxml="$work/lm-ref.xml" >"$work/lm-ref.log" 2>&1 || true
echo "== MLX's python/tests"; "$py" "$root/scripts/junit_compare.py" "$work/mlx-mkpy.xml" "$work/mlx-ref.xml"
echo "== mlx-lm's tests"; "$py" "$root/scripts/junit_compare.py" "$work/lm-mkpy.xml" "$work/lm-ref.xml"
