# The lockctl tier's shell helpers, sourced by its scripts once they have made $work (a scratch
# directory) and set $LOCKCTL. Each check that fails says so and counts; `finish` ends the script.
failures=0
current=""
section() { current=$1; echo "-- $1"; }
fail() { echo "FAIL [$current]: $*"; failures=$((failures + 1)); }
lockctl() { "$LOCKCTL" "$@"; }   # background runs use "$LOCKCTL" itself, so $! is its pid

# expect CODE CMD...: runs CMD, keeps stdout in $out and stderr in $err, checks the exit code.
expect() {
    local want=$1
    shift
    out=$("$@" 2>"$work/stderr")
    got=$?
    err=$(cat "$work/stderr")
    [ "$got" -eq "$want" ] || fail "$* exited $got, not $want (stderr: $err)"
}
same() { [ "$1" == "$2" ] || fail "expected '$2', got '$1'"; }
contains() { [[ "$1" == *"$2"* ]] || fail "'$1' does not contain '$2'"; }
one_line() { [ "$(printf '%s\n' "$1" | wc -l)" -eq 1 ] || fail "not one line: $1"; }
json_field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(eval('d'+sys.argv[2]))" "$1" "$2"; }
# until_true SECONDS CMD...: polls CMD until it succeeds or the time is up.
until_true() {
    local deadline=$((SECONDS + $1))
    shift
    while [ $SECONDS -lt $deadline ]; do "$@" && return 0; sleep 0.1; done
    "$@"
}

# finish WHAT: the last line, and the exit status: 1 if any check failed.
finish() {
    if [ "$failures" -gt 0 ]; then
        echo "$1: $failures failure(s)"
        exit 1
    fi
    echo "$1: all passed"
}
