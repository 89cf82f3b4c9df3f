#!/usr/bin/env bash
# Installs the pinned packages the Stripe MCP probe runs against, under target/stripe-probe/.
# Usage (from anywhere): bash crates/intentgate-mcp/tests/stripe/install.sh
#
# Each folder of lock/ holds a package.json and the package-lock.json it was resolved to, so
# `npm ci` installs the same tree every time (transitive versions included):
#   mcp-0.3.3      @stripe/mcp 0.3.3, the npm `latest`: a stdio relay to Stripe's hosted server
#   mcp-0.2.5      @stripe/mcp 0.2.5, the last release that runs its tools locally
#                  (@stripe/agent-toolkit 0.7.12, stripe 17.7.0)
#   toolkit-0.9.0  @stripe/agent-toolkit 0.9.0, its `latest`, installed only to be read
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
dest="$root/target/stripe-probe"
mkdir -p "$dest"

for name in mcp-0.3.3 mcp-0.2.5 toolkit-0.9.0; do
  dir="$dest/$name"
  mkdir -p "$dir"
  cp "$here/lock/$name/package.json" "$here/lock/$name/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --legacy-peer-deps >/dev/null)
  echo "installed $name in $dir"
done

# The official Python MCP client, the same pin as crates/intentgate-mcp/tests/python.
if [ ! -x "$dest/venv/bin/python" ]; then
  python3 -m venv "$dest/venv"
fi
"$dest/venv/bin/pip" install --quiet "mcp==2.3.0"
"$dest/venv/bin/python" -c 'import importlib.metadata as m; print("installed mcp", m.version("mcp"), "(Python client)")'
