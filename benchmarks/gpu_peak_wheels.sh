#!/bin/sh
# Wheels benchmarks/gpu_peak.py needs on the device tool's H200 image (Python 3.12, x86-64, no
# network there), which lacks deepspeed and what it and ds-advisor import: pydantic (+ core,
# annotated-types, typing-inspection), hjson, jsonschema (+ specifications, referencing, rpds-py).
# Run here, in the repository root; writes .whl/ (git-ignored through .git/info/exclude).
set -e
grep -qx '/.whl/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null || echo /.whl/ >> "$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p .whl
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d .whl \
  pydantic==2.13.4 "pydantic-core==$(python3 -c 'import pydantic_core; print(pydantic_core.__version__)')" \
  annotated-types typing-inspection hjson==3.1.0 jsonschema jsonschema-specifications referencing rpds-py
# DeepSpeed publishes an sdist only: build its pure-Python wheel here (no ops prebuilt; the
# benchmark JIT-builds fused_adam and cpu_adam there with that machine's nvcc)
DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps -w .whl deepspeed==0.19.8
ls -la .whl
