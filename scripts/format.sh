#!/usr/bin/env bash
# Formats every C++ and CUDA file of the repository with clang-format (.clang-format; Debian 12's
# clang-format 14, installed by scripts/setup.sh): tracked files and new ones git does not ignore
# (a file not yet added is formatted and checked too).
#   bash scripts/format.sh           rewrite the files in place
#   bash scripts/format.sh --check   change nothing; list the files that differ and exit 1 if any
#                                    (.ci/run runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
format=$(command -v clang-format-14 || command -v clang-format || true)
[[ -n $format ]] || { echo "format: clang-format not found (bash scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.h' '*.cpp' '*.cu' '*.cuh')
if [[ ${1:-} == --check ]]; then
  bad=()
  for f in "${files[@]}"; do
    "$format" --dry-run -Werror "$f" > /dev/null 2>&1 || bad+=("$f")
  done
  if [[ ${#bad[@]} -gt 0 ]]; then
    echo "format: ${#bad[@]} of ${#files[@]} files differ from clang-format's layout (run bash scripts/format.sh):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files formatted"
else
  "$format" -i "${files[@]}"
fi
