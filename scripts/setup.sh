#!/usr/bin/env bash
# Create .venv and install nakflow with every extra.
#
# Where we are root on Debian, install Debian's libzmq3-dev (built with OpenPGM)
# and build pyzmq from source against it, so that zmq.has("pgm") is true and
# real IP multicast (epgm://) works. Elsewhere fall back to the PyPI wheel
# (no multicast) and say so.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}

log() { printf '[setup] %s\n' "$*" >&2; }

have_pgm_lib=0
if pkg-config --exists libzmq 2>/dev/null && ldconfig -p 2>/dev/null | grep -q libpgm; then
  have_pgm_lib=1
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  log "installing Debian's libzmq3-dev (ZeroMQ built with OpenPGM) ..."
  if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
         libzmq3-dev pkg-config iproute2 util-linux; } >/dev/null; then
    have_pgm_lib=1
  else
    log "apt-get failed; falling back to the pyzmq wheel (no multicast)"
  fi
else
  log "not root or not Debian: using the pyzmq wheel, epgm:// multicast will be unavailable"
fi

# Debian's Prometheus Pushgateway, for the test of Spark tasks pushing their metrics
if ! command -v prometheus-pushgateway >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null 2>&1; then
  log "installing Debian's prometheus-pushgateway ..."
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      prometheus-pushgateway; } >/dev/null || log "apt-get failed: no Pushgateway test"
fi

# The peers benchmarks/ measures beside nakflow: NORM (NRL's libnorm, NORM-CC, through
# ctypes: benchmarks/norm_peer.py) and JGroups (benchmarks/jgroups/Member.java). The
# benchmarks skip a peer they cannot start and say why; no test needs them.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    && { ! ldconfig -p 2>/dev/null | grep -q libnorm || [ ! -e /usr/share/java/jgroups.jar ]; }; then
  log "installing Debian's libnorm1 and libjgroups-java (benchmark peers) ..."
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      libnorm1 libjgroups-java; } >/dev/null || log "apt-get failed: no NORM/JGroups peer rows"
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install --upgrade pip >/dev/null

if [ "$have_pgm_lib" = 1 ]; then
  if ! "$VENV/bin/python" -c 'import zmq, sys; sys.exit(0 if zmq.has("pgm") else 1)' 2>/dev/null; then
    log "building pyzmq from source against the system libzmq (about 15 s) ..."
    pip install --force-reinstall --no-binary pyzmq pyzmq
  fi
fi
log "installing nakflow and its extras (pyspark is large: the first run takes a while) ..."
# setuptools warns on every editable install about same-named folders in the working
# directory; our packages are those folders, so the banner only adds noise
PYTHONWARNINGS="ignore:Editable installation:UserWarning" pip install -e ".[spark,connect,plot,metrics,dev,speedups,docs]"
# the hot modules' compiled twins (Cython; pure Python is the fallback, see nakflow/_speedups.py)
"$VENV/bin/python" scripts/build_speedups.py || log "no compiled modules: nakflow runs as pure Python"
"$VENV/bin/python" - <<'PY'
import zmq
print(f"[setup] pyzmq {zmq.pyzmq_version()} on libzmq {zmq.zmq_version()}, "
      f"multicast (pgm): {'yes' if zmq.has('pgm') else 'NO'}", flush=True)
PY
