#!/usr/bin/env bash
# Expand/contract check (docs/deploy.md, "Upgrading without downtime"): runs the PREVIOUS release's store
# tests against the schema of THIS tree's migrations. During a rolling upgrade, replicas of the previous
# release run on the schema the new release migrated; a migration that drops or renames what their
# queries use (a "contract" step taken too early) makes these tests fail.
#
#   deploy/migration-compat.sh [previous-ref]     (make migration-compat PREV=<ref>)
#
# previous-ref defaults to the newest tag, or, without tags, to the parent of the commit that added the
# newest migration (the code that ran before it). The previous tree is exported with `git archive` into a
# temporary folder (the repository is not touched), its migrations/ is replaced by this tree's (a
# superset: migrations are only ever added), and its store tests run there against a private PostgreSQL.
# COMPAT_PKGS chooses the packages (default: the store and the fleet service, which drives it).
set -euo pipefail
cd "$(dirname "$0")/.."
prev=${1:-}
if [ -z "$prev" ]; then
  prev=$(git describe --tags --abbrev=0 2>/dev/null || true)
fi
if [ -z "$prev" ]; then
  newest=$(git log -n1 --diff-filter=A --format=%H -- 'migrations/*.sql')
  prev="$newest^"
fi
pkgs=${COMPAT_PKGS:-./internal/postgres/ ./internal/fleet/}
dir=$(mktemp -d "${TMPDIR:-/tmp}/wfm-compat.XXXXXX")
trap 'rm -rf "$dir"' EXIT
echo "previous release: $(git log -n1 --format='%h %s' "$prev" | cut -c1-100)"
git archive --format=tar "$prev" | tar -x -C "$dir"
added=$(comm -13 <(cd "$dir/migrations" && ls *.sql | sort) <(cd migrations && ls *.sql | sort))
echo "migrations new since then: $(echo ${added:-none})"
for f in $(cd "$dir/migrations" && ls *.sql); do
  if ! cmp -s "$dir/migrations/$f" "migrations/$f"; then
    echo "migration $f was changed after it was released: migrations are append-only" >&2
    exit 1
  fi
done
cp migrations/*.sql "$dir/migrations/"
cd "$dir"
# shellcheck disable=SC2086
go test -count=1 $pkgs
