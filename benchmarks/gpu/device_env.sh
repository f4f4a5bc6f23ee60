# Sourced at the start of a device call that carried ".whl" (built by benchmarks/gpu/wheels.sh): installs
# those wheels into /tmp/site, puts them on PYTHONPATH and exports OUT for the device scripts.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} OUT
