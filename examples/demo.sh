#!/usr/bin/env bash
# The demo behind `make demo`: the whole story on this machine.
#   as root on Linux: a 2-node rehearsal cluster (network namespaces, sshd, Docker Engines,
#                     a private registry), then up -> run -> collect-logs over real SSH
#   otherwise:        inventory/local.yaml (no SSH, no Docker), same commands
# `bash examples/demo.sh clean` (make demo-clean) undoes it. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# The ranks run `python3` from PATH (job.python): make it the environment that has torch.
PATH="$(cd "$(dirname "$(command -v "$PYTHON")")" && pwd):$PATH"
export PATH
clusterctl() { "$PYTHON" -m clusterctl "$@"; }
say() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }

if [ "${1:-}" = clean ]; then
  if [ "$(id -u)" = 0 ] && [ -e /var/tmp/clusterctl-sandbox ]; then
    clusterctl down -i /var/tmp/clusterctl-sandbox/inventory.yaml >/dev/null 2>&1 || true
    clusterctl sandbox down
  fi
  rm -rf .clusterctl/demo logs/demo-*
  exit 0
fi

export CLUSTERCTL_STATE=.clusterctl/demo
if [ "$(id -u)" = 0 ] && [ "$(uname -s)" = Linux ]; then
  say "a 2-node rehearsal cluster on this machine (clusterctl sandbox up 2 --docker)"
  inventory=$(clusterctl sandbox up 2 --docker)
else
  say "not root: no rehearsal cluster; running on this machine alone with inventory/local.yaml"
  # the same inventory, with outputs in this checkout (a shared /tmp path may belong to another user)
  mkdir -p "$CLUSTERCTL_STATE"
  inventory=$CLUSTERCTL_STATE/local.yaml
  sed "s#^  outputs: .*#  outputs: $PWD/$CLUSTERCTL_STATE/outputs#" inventory/local.yaml > "$inventory"
fi

say "clusterctl up $inventory"
clusterctl up "$inventory"

say "clusterctl run examples/prompt.txt"
run_ok=0
clusterctl run examples/prompt.txt || run_ok=$?
run_id=$("$PYTHON" -c 'import sys; from clusterctl.state import State; print(State.here().last_run_id())')

say "clusterctl collect-logs"
clusterctl collect-logs --run "$run_id" --dest "logs/demo-$run_id"
[ "$run_ok" = 0 ] || { say "the run failed: the diagnosis is above, the logs in logs/demo-$run_id"; exit 1; }

image=$(find "logs/demo-$run_id" -name "$run_id.gif" | head -n 1)
say "done"
echo "output image: ${image:-not found}"
echo "logs:         logs/demo-$run_id/ (per host: logs/, diag/, outputs/; manifest.json)"
echo "run record:   $CLUSTERCTL_STATE/runs/$run_id/run.json"
