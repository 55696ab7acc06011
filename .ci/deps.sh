#!/usr/bin/env bash
# Installs what aiod needs when it is missing.
#   .ci/deps.sh run   - what the daemon needs: ipykernel, pandas, matplotlib, dill (session
#                       snapshots) for /usr/bin/python3, and httpx, which the README's
#                       walkthrough (examples/) imports
#   .ci/deps.sh list run|test - print the Debian packages of that mode, one a line, and exit
#   .ci/deps.sh test  - that, plus what the tests drive: Node.js and npm,
#                       jupyter_client/server, websocket-client, nbformat (the browser
#                       tests validate the .ipynb the page writes), nbclient (a notebook run
#                       through jupyter_server's gateway client), and the npm packages
#                       of gateway/testdata/jlab (ws, @jupyterlab/services), gateway/testdata/mcp
#                       (@modelcontextprotocol/sdk), web/e2e
#                       (playwright-core) and web/vendor (the page's bundled libraries
#                       and esbuild, for the bundle check) from their lock files, Chromium,
#                       and nats-server (the replicas' tests run a JetStream cluster)
# Debian packages are installed only as root (or with passwordless sudo) and unless
# AIO_NO_INSTALL=1; otherwise the apt-get line is printed and, for "test", it fails.
set -euo pipefail
mode=${1:-run}
list=0
if [ "$mode" = list ]; then list=1; mode=${2:-run}; fi
here=$(cd "$(dirname "$0")/.." && pwd)
pkgs=(python3-ipykernel python3-pandas python3-matplotlib python3-dill python3-httpx)
if [ "$mode" = test ]; then
  pkgs+=(python3-jupyter-client python3-jupyter-server python3-websocket python3-nbformat python3-nbclient)
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
  pkgs+=(chromium) # the browser tests drive Debian's Chromium with playwright-core
  pkgs+=(nats-server) # the cluster tests run three JetStream servers
fi
if [ "$list" = 1 ]; then printf '%s\n' "${pkgs[@]}"; exit 0; fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; fi
  if [ "${AIO_NO_INSTALL:-0}" = 1 ] || { [ "$(id -u)" != 0 ] && [ -z "$sudo" ]; }; then
    echo "aiod: missing Debian packages: ${missing[*]}" >&2
    echo "aiod: install them with: apt-get install -y ${missing[*]}" >&2
    [ "$mode" = test ] && exit 1
    exit 0
  fi
  echo "aiod: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "$mode" = test ]; then
  # npm ci again only when the lock file changed since the last install
  # (a copy of it is kept beside the packages): a clean clone installs, a
  # second run (make bench-quick, make test again) takes no time.
  for d in gateway/testdata/jlab gateway/testdata/mcp web/e2e web/vendor; do
    lock="$here/$d/package-lock.json" stamp="$here/$d/node_modules/.aiod-installed-lock"
    if [ -f "$stamp" ] && cmp -s "$lock" "$stamp"; then continue; fi
    npm ci --prefix "$here/$d" --no-audit --no-fund --ignore-scripts >/dev/null
    cp "$lock" "$stamp"
  done
fi
