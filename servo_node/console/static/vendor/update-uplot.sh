#!/bin/sh
# Where the console's chart library comes from: uPlot (MIT) as published on npm, unmodified. Run from anywhere with
# npm on the PATH to fetch the version below again (or another: ./update-uplot.sh 1.6.33), then commit the result.
# The page loads these files from the package; nothing is fetched at run time.
set -eu
version=${1:-1.6.32}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "uplot@$version" >/dev/null && tar xzf "uplot-$version.tgz")
out="$here/uplot"
mkdir -p "$out"
cp "$work/package/dist/uPlot.iife.min.js" "$work/package/dist/uPlot.min.css" "$work/package/LICENSE" "$out/"
printf 'uplot %s (npm: uplot@%s, dist/uPlot.iife.min.js and dist/uPlot.min.css, unmodified; MIT, see LICENSE)\n' \
    "$version" "$version" >"$out/VERSION"
echo "uPlot $version in $out"
