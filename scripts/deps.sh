# shellcheck shell=bash
# The Debian 12 packages perftracker needs to build and to run every test. The one list,
# sourced by scripts/setup.sh and scripts/test.sh.
PERFTRACKER_DEPS=(
  # toolchain
  cmake ninja-build g++ pkg-config
  # compiles each unchanged file once across clean builds (CMakeLists.txt, PERFTRACKER_CCACHE)
  ccache
  # C++ libraries (cmake/Dependencies.cmake checks each one and names its package)
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libfmt-dev libspdlog-dev
  nlohmann-json3-dev libprotobuf-dev protobuf-compiler zlib1g-dev libzstd-dev
  pybind11-dev python3-dev
  # the server: gRPC control plane, SQLite store, HTTP UI/API (TLS through OpenSSL), metrics
  libgrpc++-dev protobuf-compiler-grpc libsqlite3-dev libcpp-httplib-dev libssl-dev
  prometheus-cpp-dev
  # the PostgreSQL store (libpq), and the PostgreSQL server its tests start (initdb, postgres)
  libpq-dev postgresql
  # integration tests: a real Prometheus scrapes /metrics; headless Chromium opens the web UI
  prometheus chromium
  # end-to-end tests: a real multi-process torch job (CPU, gloo) writes the traces
  python3 python3-torch
  # network namespaces and tc tbf (e2e_server's hosts, the net_rate_limit fault; as root)
  iproute2
)

# Installs the packages that are missing (non-interactively; with sudo when not root).
perftracker_install_deps() {
  local missing=() pkg
  for pkg in "${PERFTRACKER_DEPS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  # The web UI's chart library (uPlot) comes from npm at build time: any npm will do
  # (Debian's package, or one that came with Node.js).
  command -v npm >/dev/null || missing+=(npm)
  if [ ${#missing[@]} -eq 0 ]; then
    echo "perftracker: all ${#PERFTRACKER_DEPS[@]} build and test packages are installed"
    return 0
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "perftracker: need root to install: ${missing[*]} (run as root or install sudo)" >&2
      return 1
    fi
    sudo=(sudo)
  fi
  echo "perftracker: installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "${missing[@]}"
}
