# Sourced by the build scripts, from the clone's root. Compiles through ccache when it is there,
# with paths under the clone hashed relative to it: a fresh clone on the same machine (CI's)
# reuses what an earlier clone compiled instead of spending minutes on each of its two builds.
cache_args=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD"
  # The sanitizer build has line tables, which would put the build folder's absolute path into
  # each key; a stack trace then names the first clone's folder, which holds the same files.
  export CCACHE_NOHASHDIR=1
  cache_args=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
