#!/usr/bin/env bash
# lockctl's role, user and token commands as an admin runs them, against a real 3-replica cell
# with auth on: the admin makes a role granting read on key:app/, a user with it and a token;
# that token reads app/x and is refused (exit 5) writing it or reading other/; a token without
# the admin role manages nothing; malformed arguments are usage errors (exit 2) that change
# nothing; the revoked token is 401 at every replica. Runs in the cell's client namespace under
# tests/clib/run_in_cell.py --auth, which sets LOCKCTL, VL_TEST_ENDPOINTS, VL_TEST_RUN and
# VL_TEST_ADMIN_TOKEN (the cell's bootstrap admin).
set -uo pipefail

: "${LOCKCTL:?} ${VL_TEST_ENDPOINTS:?} ${VL_TEST_RUN:?} ${VL_TEST_ADMIN_TOKEN:?}"
export VOLTLOCK_ENDPOINTS=$VL_TEST_ENDPOINTS
unset VOLTLOCK_TOKEN
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/helpers.sh"

admin() { VOLTLOCK_TOKEN=$VL_TEST_ADMIN_TOKEN "$LOCKCTL" "$@"; }
# The users, roles and tokens of the replicated tables, with their revision: what a refused
# command must leave as it was.
tables() { for table in role user token; do admin -w json "$table" list || return 1; done; }
# every_endpoint SECONDS CODE CMD...: CMD at each endpoint alone exits CODE within the time (a
# follower applies an auth op one commit round after the leader).
every_endpoint() {
    local seconds=$1 code=$2
    shift 2
    for endpoint in ${VL_TEST_ENDPOINTS//,/ }; do
        at_endpoint() { "$@" --endpoints "$endpoint" >/dev/null 2>&1; [ $? -eq "$code" ]; }
        until_true "$seconds" at_endpoint "$@" || fail "$* did not exit $code at $endpoint"
    done
}
name=$(tr -c 'a-zA-Z0-9\n' - <<<"$VL_TEST_RUN")   # user and role names hold no '/'
role=$name-reader
user=$name-app

section "no token (401), an unknown one (401): exit 5"
expect 5 lockctl role list
contains "$err" "Error: unauthenticated: "
one_line "$err"
expect 5 lockctl --token "vl_$(printf '0%.0s' {1..64})" user list
contains "$err" "unauthenticated"

section "role add, grant-permission, revoke-permission, get, list"
expect 0 admin role add "$role"
same "$out" "Role $role created"
expect 1 admin role add "$role"
contains "$err" "Error: already_exists: role $role exists"
expect 0 admin role grant-permission "$role" read key:app/
same "$out" "Role $role updated"
expect 0 admin role grant-permission "$role" watch,read key:app/
expect 0 admin -w json role grant-permission "$role" lock lock:app/
[ "$(json_field "$out" '["auth_revision"]')" -gt 0 ] || fail "no auth_revision in $out"
expect 0 admin -w json role get "$role"
same "$(json_field "$out" '["grants"]')" \
    "[{'permissions': ['read', 'watch'], 'resource': 'key:app/'}, {'permissions': ['lock'], 'resource': 'lock:app/'}]"
expect 0 admin role revoke-permission "$role" key:app/ watch
expect 0 admin role revoke-permission "$role" lock:app/
expect 1 admin role revoke-permission "$role" lock:app/
contains "$err" "Error: not_found: role $role has no grant on lock:app/ (it has: read key:app/)"
expect 0 admin role get "$role"
same "$out" "Role $role
  read key:app/"
expect 0 admin role list
grep -qx -- "$role" <<<"$out" || fail "role list does not name $role: $out"
expect 0 admin -w table role list
contains "$out" "| $role "
contains "$out" "| read "
expect 1 admin role get "$name-nosuch"
contains "$err" "Error: not_found: "

section "user add, grant-role, get; token create prints the token once"
expect 0 admin user add "$user"
same "$out" "User $user created"
expect 1 admin user add "$user"
expect 0 admin user grant-role "$user" "$role"
same "$out" "Role $role is granted to user $user"
expect 1 admin user grant-role "$user" "$name-nosuch"
contains "$err" "not_found"
expect 0 admin put app/x v1
expect 0 admin put other/x theirs
expect 0 admin token create "$user"
token=$out
[[ "$token" =~ ^vl_[0-9a-f]{64}$ ]] || fail "token create printed '$token', not a token"
expect 0 admin -w json token list
[[ "$out" != *"$token"* ]] || fail "token list shows the token itself"
id=$(python3 -c 'import json,sys; print(*[t["id"] for t in json.loads(sys.argv[1])["tokens"]
                                           if t["user"] == sys.argv[2]])' "$out" "$user")
[[ "$id" =~ ^[0-9a-f]{16}$ ]] || fail "token list has no one token of $user: $out"
expect 0 admin user get "$user"
same "$out" "User: $user
Roles: $role
Tokens: $id"
expect 0 admin -w json user list
contains "$out" "\"name\":\"$user\""

section "the token reads app/x; writing it or reading other/ is 403 (exit 5), nothing changed"
every_endpoint 10 0 lockctl --token "$token" get app/x
expect 0 lockctl --token "$token" get app/x
same "$out" "app/x
v1"
expect 5 lockctl --token "$token" put app/x mine
contains "$err" "Error: permission_denied: "
one_line "$err"
expect 5 lockctl --user "$user:$token" get other/x
contains "$err" "permission_denied"
VOLTLOCK_TOKEN=$token expect 5 lockctl get other/ --prefix
expect 0 admin get app/x
same "$out" "app/x
v1"

section "a token without the admin role manages nothing (403, exit 5)"
tables >"$work/before" || fail "the admin could not list the tables"
for command in "user add $name-evil" "user grant-role $user admin" "role add $name-evil" \
               "role delete $role" "role grant-permission $role admin key:" \
               "token create $user" "token revoke $id" "token list" "user list"; do
    # shellcheck disable=SC2086  # the command's words
    expect 5 lockctl --token "$token" $command
    contains "$err" "permission_denied"
done
tables >"$work/after"
cmp -s "$work/before" "$work/after" || fail "a refused command changed the tables"

section "malformed arguments: usage errors (exit 2), nothing changed"
expect 2 admin role add
expect 2 admin role add "$role" extra
expect 2 admin role
contains "$err" "usage: lockctl role add|get|list|delete|grant-permission|revoke-permission"
expect 2 admin role frobnicate
expect 2 admin role grant-permission "$role" fly key:app/
contains "$err" "'fly' is not a permission (read, write, lock, watch, admin)"
expect 2 admin role grant-permission "$role" read keys:app/
contains "$err" "key:PREFIX, lock:PREFIX, barrier:PREFIX or *"
expect 2 admin role grant-permission "$role" read
expect 2 admin role revoke-permission "$role" key:app/ write,fly
expect 2 admin role add team/billing
contains "$err" "without '/'"
expect 2 admin role delete admin
contains "$err" "built in"
expect 2 admin role add admin
expect 2 admin user add "$(printf 'u%.0s' {1..65})"
expect 2 admin user grant-role "$user"
expect 2 admin user get "$user" --prefix
expect 2 admin token create
expect 2 admin token create "$user" --ttl 1.5s
contains "$err" "whole seconds"
expect 2 admin token create "$user" --ttl 500ms
expect 2 admin token create "$user" --ttl soon
expect 2 admin token create "$user" --ttl 100000h
contains "$err" "ten years"
expect 2 admin token revoke NOT-AN-ID
contains "$err" "16 lowercase hex digits"
expect 2 admin token list extra
tables >"$work/after"
cmp -s "$work/before" "$work/after" || fail "a usage error changed the tables"

section "the token revoked: 401 (exit 5) at every replica"
expect 0 admin token revoke "$id"
same "$out" "Token $id revoked"
every_endpoint 10 5 lockctl --token "$token" get app/x
expect 5 lockctl --token "$token" get app/x
contains "$err" "Error: unauthenticated: "
expect 1 admin token revoke "$id"
contains "$err" "not_found"
expect 0 admin user get "$user"
same "$(tail -1 <<<"$out")" "Tokens: "

section "a token with a TTL, the tables, revoke-role, deletes"
expect 0 admin -w json token create "$user" --ttl 1h
same "$(json_field "$out" '["ttl_s"]')" "3600"
same "$(json_field "$out" '["user"]')" "$user"
expiring=$(json_field "$out" '["id"]')
expect 0 admin -w table token list
contains "$out" "| ID "
contains "$out" "| $expiring | $user "
expect 0 admin token list
line=$(grep "^$expiring " <<<"$out")
[[ "$line" =~ ^$expiring\ $user\ [0-9-]{10}T[0-9:]{8}Z\ [0-9-]{10}T[0-9:]{8}Z$ ]] ||
    fail "token list's line is '$line'"
expect 0 admin -w table user get "$user"
contains "$out" "| $user | $role | $expiring |"
expect 0 admin user revoke-role "$user" "$role"
same "$out" "Role $role is revoked from user $user"
expect 1 admin user revoke-role "$user" "$role"
expect 0 admin user delete "$user"
same "$out" "User $user deleted"
expect 0 admin token list
[[ "$out" != *"$expiring"* ]] || fail "deleting the user left its token: $out"
expect 0 admin -w json role delete "$role"
[ "$(json_field "$out" '["auth_revision"]')" -gt 0 ] || fail "no auth_revision in $out"
expect 1 admin role delete "$role"

section "help and completion"
expect 0 lockctl role --help
contains "$out" "role grant-permission NAME PERMS RESOURCE"
expect 0 lockctl token --help
contains "$out" "token create USER [--ttl 24h]"
expect 0 lockctl completion bash
contains "$out" "grant-permission revoke-permission"
bash -c "$out"$'\n'"complete -p lockctl" >/dev/null || fail "the bash completion does not load"
expect 0 lockctl completion zsh
contains "$out" "'token command' create revoke list"

finish "lockctl auth tests"
