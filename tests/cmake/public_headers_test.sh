#!/usr/bin/env bash
# The installed headers are exactly the include closure of the public entry headers
# (cmake/public_headers.cmake) and of what the example pipeline built against the install includes
# (apps/examples/custom_pipeline/): a public header that includes an unlisted project header, or a
# listed header no public one needs, fails here with the difference.
#   bash public_headers_test.sh SOURCE_DIR BUILD_DIR CXX
set -euo pipefail
src=$1
build=$2
cxx=$3
list() {  # the entries of set(NAME ...) in the cmake file
  sed -n "/^set($1\$/,/^)/p" "$src/cmake/public_headers.cmake" | sed '1d;$d' | tr -d ' '
}
entries=$(list GRADMESH_PUBLIC_ENTRY_HEADERS)
listed=$(list GRADMESH_PUBLIC_HEADERS | sort -u)
probe=$(mktemp --suffix=.cpp)
trap 'rm -f "$probe"' EXIT
example=$(cat "$src"/apps/examples/custom_pipeline/*.h "$src"/apps/examples/custom_pipeline/*.cpp |
  sed -n 's/^#include "\(\(engine\|net\|sync\|tasks\|topo\|apps\)\/[^"]*\)"/\1/p' | sort -u)
for e in $entries $example; do echo "#include \"$e\""; done > "$probe"
closure=$(cd "$src" && "$cxx" -std=c++20 -MM -I. -I"$build/generated" "$probe" | tr ' \\' '\n\n' |
  grep -E '^(engine|net|sync|tasks|topo|apps)/' | sort -u)
if [[ "$closure" != "$listed" ]]; then
  echo "cmake/public_headers.cmake differs from the include closure of its entry headers:"
  diff <(echo "$listed") <(echo "$closure") | sed 's/^</  listed, not included:/; s/^>/  included, not listed:/'
  exit 1
fi
echo "$(echo "$listed" | wc -l) public headers, the include closure of $(echo "$entries" | wc -w) entries"
