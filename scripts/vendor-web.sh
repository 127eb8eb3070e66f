#!/usr/bin/env bash
# Re-creates gateway/static/vendor/ from the npm registry: the web page's
# third-party libraries, copied byte for byte from their published packages
# (`npm pack`), each beside its license, and SHA256SUMS over every file.
# The server never fetches anything at run time: these files ship with it.
# Run it after changing a version below; tests/gateway/test_web_assets.py
# checks the files against SHA256SUMS. Needs npm (only here, never at run time).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=gateway/static/vendor
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# package@version  file in the package  ->  file under $dest
files=(
  "marked@18.2.1 lib/marked.esm.js marked/marked.esm.js"
  "marked@18.2.1 LICENSE marked/LICENSE"
  "dompurify@3.4.18 dist/purify.es.mjs dompurify/purify.es.js"
  "dompurify@3.4.18 LICENSE dompurify/LICENSE"
  "dompurify@3.4.18 LICENSE-MPL dompurify/LICENSE-MPL"
  "@highlightjs/cdn-assets@11.12.0 es/highlight.min.js highlight/highlight.min.js"
  "@highlightjs/cdn-assets@11.12.0 styles/github.min.css highlight/github.min.css"
  "@highlightjs/cdn-assets@11.12.0 styles/github-dark.min.css highlight/github-dark.min.css"
  "@highlightjs/cdn-assets@11.12.0 LICENSE highlight/LICENSE"
  "uplot@1.6.32 dist/uPlot.esm.js uplot/uPlot.esm.js"
  "uplot@1.6.32 dist/uPlot.min.css uplot/uPlot.min.css"
  "uplot@1.6.32 LICENSE uplot/LICENSE"
)

for entry in "${files[@]}"; do
  read -r package source target <<<"$entry"
  unpacked="$work/$(echo "$package" | tr '/@' '__')"
  if [ ! -d "$unpacked" ]; then
    mkdir -p "$unpacked"
    tarball="$(cd "$work" && npm pack --silent "$package")"
    tar xzf "$work/$tarball" -C "$unpacked"
  fi
  mkdir -p "$dest/$(dirname "$target")"
  # .mjs becomes .js: StaticFiles names the type from the extension, and a
  # module script must come as JavaScript.
  cp "$unpacked/package/$source" "$dest/$target"
done
(cd "$dest" && find . -type f ! -name SHA256SUMS ! -name README.md | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
echo "vendored into $dest:"
cat "$dest/SHA256SUMS"
