#!/usr/bin/env bash
# Fetch third-party jar sets from Maven Central into .cache/jars/<set>/ (ignored by git).
#
#   bash jars/fetch.sh            # default set: kafka
#   bash jars/fetch.sh kafka ...  # one or more sets; each is a profile in jars/pom.xml
#
# A set is fetched again only when jars/pom.xml or this script changed since its last
# successful fetch: .cache/jars/<set>.stamp holds their checksum, so a second run is a no-op.
# Set JARS_FORCE=1 to fetch anyway.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cache="$root/.cache/jars"
pom="$here/pom.xml"

if [ "$#" -eq 0 ]; then
    set -- kafka
fi

command -v mvn >/dev/null || { echo "fetch.sh: mvn (Maven) is required" >&2; exit 1; }

want="$(cat "$pom" "$here/fetch.sh" | sha256sum | cut -d' ' -f1)"
mkdir -p "$cache"

for set_name in "$@"; do
    case "$set_name" in
        *[!A-Za-z0-9_.-]* | "") echo "fetch.sh: bad set name '$set_name'" >&2; exit 2 ;;
    esac
    stamp="$cache/$set_name.stamp"
    out="$cache/$set_name"
    if [ "${JARS_FORCE:-0}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
        && [ -d "$out" ]; then
        continue
    fi
    echo "fetch.sh: fetching jar set '$set_name' into .cache/jars/$set_name/" >&2
    # Download into a temporary folder and rename, so an interrupted run leaves no half set and a
    # set in use (by a running broker or test) stays whole until its replacement is complete.
    tmp="$cache/.$set_name.partial"
    rm -rf "$tmp"
    mvn -B -q -Dstyle.color=never -f "$pom" -P "$set_name" -Djars.root="$cache" -Djars.set=".$set_name.partial" \
        dependency:copy-dependencies
    if ! ls "$tmp"/*.jar >/dev/null 2>&1; then
        echo "fetch.sh: profile '$set_name' produced no jars (is it defined in jars/pom.xml?)" >&2
        rm -rf "$tmp"
        exit 1
    fi
    if [ -d "$out" ] && diff -rq "$tmp" "$out" >/dev/null; then
        rm -rf "$tmp"  # the same jars: keep the set in place
    else
        rm -rf "$out"
        mv "$tmp" "$out"
    fi
    echo "$want" >"$stamp"
done
