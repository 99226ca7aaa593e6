# Sourced, not run: `. scripts/use-node.sh`. Puts the Node.js ObjectCache runs on (24 LTS) first
# on PATH for this shell. The node already on PATH is used when it is 24 or newer; otherwise the
# official build is installed once from the npm registry (the node-<os>-<arch> package, which holds
# the same binary as nodejs.org's tarball) into ~/.cache/objectcache/node-<version> (or
# $OBJECTCACHE_CACHE/node-<version>), using the npm
# of whatever older Node is on PATH. OBJECTCACHE_NODE_VERSION names another 24.x build to install
# (it has no effect when the node on PATH is 24 or newer already).
# Used by the README's set-up and by .ci/run.

objectcache_use_node() {
  local version="${OBJECTCACHE_NODE_VERSION:-24.21.0}"
  local major="${version%%.*}"
  local have
  have="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
  if [ "$have" -ge "$major" ] 2>/dev/null; then
    return 0
  fi
  local os arch
  case "$(uname -s)" in
    Linux) os=linux ;;
    Darwin) os=darwin ;;
    *) echo "use-node.sh: no Node.js $major build for $(uname -s); install Node.js $major LTS and try again" >&2; return 1 ;;
  esac
  case "$(uname -m)" in
    x86_64 | amd64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) echo "use-node.sh: no Node.js $major build for $(uname -m); install Node.js $major LTS and try again" >&2; return 1 ;;
  esac
  local dir="${OBJECTCACHE_CACHE:-$HOME/.cache/objectcache}/node-$version"
  local bin="$dir/node_modules/node-$os-$arch/bin"
  if [ ! -x "$bin/node" ]; then
    if ! command -v npm >/dev/null 2>&1; then
      echo "use-node.sh: Node.js $major is needed and there is no npm to install it with; install Node.js $major LTS and try again" >&2
      return 1
    fi
    echo "use-node.sh: installing Node.js $version (node-$os-$arch from the npm registry) into $dir" >&2
    mkdir -p "$dir" &&
      npm install --prefix "$dir" --no-save --no-audit --no-fund --loglevel=error "node-$os-$arch@$version" >&2 || {
      echo "use-node.sh: could not install node-$os-$arch@$version" >&2
      return 1
    }
  fi
  export PATH="$bin:$PATH"
  hash -r 2>/dev/null || true
}

# The helper goes with its run, so the sourcing shell keeps only the PATH (and the status).
objectcache_use_node
objectcache_use_node_status=$?
unset -f objectcache_use_node
# shellcheck disable=SC2317
return "$objectcache_use_node_status" 2>/dev/null || exit "$objectcache_use_node_status"
