#!/usr/bin/env bash
# lockctl as a shell user runs it, against a real 3-replica cell: every command, each output
# format, every exit code, locks around commands, a watch across a leader kill -9, elections.
# Runs in the cell's client namespace under tests/clib/run_in_cell.py, which sets LOCKCTL,
# VOLTLOCKD, VL_TEST_ENDPOINTS, VL_TEST_CELL, VL_TEST_CELL_SCRIPT, VL_TEST_CELL_STATE and
# VL_TEST_RUN; the cell writes a snapshot every 100 ops (for snapshot save).
set -uo pipefail

: "${LOCKCTL:?} ${VOLTLOCKD:?} ${VL_TEST_ENDPOINTS:?} ${VL_TEST_CELL:?} ${VL_TEST_CELL_SCRIPT:?}"
: "${VL_TEST_CELL_STATE:?} ${VL_TEST_RUN:?}"
export VOLTLOCK_ENDPOINTS=$VL_TEST_ENDPOINTS
work=$(mktemp -d)
background=()
cleanup() {
    for pid in "${background[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    "$VL_TEST_CELL_SCRIPT" heal --name "$VL_TEST_CELL" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

source "$(dirname "${BASH_SOURCE[0]}")/helpers.sh"
cell() { "$VL_TEST_CELL_SCRIPT" "$1" --name "$VL_TEST_CELL" "${@:2}" >/dev/null; }
P=$VL_TEST_RUN   # every key and lock name of this run starts with it

section "usage and exit code 2"
expect 0 lockctl --help
contains "$out" "Exit codes:"
contains "$out" "3  the cell is unavailable"
expect 2 lockctl
expect 2 lockctl frobnicate
contains "$err" "unknown command"
one_line "$err"
expect 2 lockctl get
expect 2 lockctl get k --bogus
contains "$err" "unknown flag --bogus"
expect 2 lockctl lock x --ttl tenseconds
contains "$err" "--ttl"
expect 2 lockctl -w yaml get k
expect 2 lockctl put k v --prev-revision minus-one
expect 2 lockctl --endpoints http://x:1,https://x:2 get k
expect 2 lockctl del k --prefix --prev-revision 3
expect 0 lockctl put --help
contains "$out" "put KEY VALUE"
expect 0 lockctl version
contains "$out" "lockctl version: "
expect 0 lockctl -w json version
same "$(json_field "$out" '["api"]')" "v1"
# A short flag takes its value after '=' too, as a long one does.
expect 0 lockctl -w=json version
same "$(json_field "$out" '["api"]')" "v1"
# "--" promises a command: with none after it, a usage error (it held the lock silently).
expect 2 timeout 10 "$LOCKCTL" lock "$P/nothing" --
contains "$err" "COMMAND"
expect 2 timeout 10 "$LOCKCTL" lock -- "-$P/nothing" --
# Names that are not UTF-8 are refused before anything is sent, like other bad names.
for command in "put $(printf 'bad\xff') v" "get $(printf 'bad\xff')" \
    "lock $(printf 'over\xc0\xaf') -- true" "del $(printf 'half\xed\xa0\x80')"; do
    read -ra words <<<"$command"
    expect 2 lockctl "${words[@]}"
    contains "$err" "Error: client_invalid_argument: "
done

section "TLS files: a mistake is exit 2 at once, naming the flag and the file"
# Nothing listens at the endpoint: what is refused is refused before any connection.
tls=(--endpoints https://127.0.0.1:1 --dial-timeout 300ms --command-timeout 1s)
make_pair() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
        -subj /CN=lockctl -keyout "$work/$1.key" -out "$work/$1.crt" >/dev/null 2>&1 ||
        fail "openssl could not make $1"
}
make_pair one
make_pair two
echo "not a certificate" >"$work/garbage.pem"
started_ms=$(date +%s%3N)
expect 2 lockctl "${tls[@]}" --cacert /nonexistent/ca.crt get k
contains "$err" "Error: --cacert /nonexistent/ca.crt: No such file or directory"
one_line "$err"
expect 2 lockctl "${tls[@]}" --cacert "$work/garbage.pem" get k
contains "$err" "--cacert $work/garbage.pem: no PEM certificate in it"
expect 2 lockctl "${tls[@]}" --cert "$work/one.crt" get k
contains "$err" "--cert without --key"
expect 2 lockctl "${tls[@]}" --key "$work/one.key" get k
contains "$err" "--key without --cert"
expect 2 lockctl "${tls[@]}" --cert /nonexistent/c.crt --key "$work/one.key" get k
contains "$err" "--cert /nonexistent/c.crt: No such file or directory"
expect 2 lockctl "${tls[@]}" --cert "$work/one.crt" --key "$work/garbage.pem" get k
contains "$err" "--key $work/garbage.pem: not an unencrypted PEM private key"
expect 2 lockctl "${tls[@]}" --cert "$work/one.crt" --key "$work/two.key" get k
contains "$err" "--key $work/two.key is not the key of --cert $work/one.crt"
VOLTLOCK_CACERT=/nonexistent/env.crt expect 2 lockctl "${tls[@]}" get k
contains "$err" '$VOLTLOCK_CACERT /nonexistent/env.crt'
took_ms=$(($(date +%s%3N) - started_ms))
[ "$took_ms" -lt 3000 ] || fail "refusing 8 TLS mistakes took $took_ms ms"
# The right files pass the check: unreachable, exit 3.
expect 3 lockctl "${tls[@]}" --cacert "$work/one.crt" --cert "$work/one.crt" \
    --key "$work/one.key" get k
contains "$err" "Error: unavailable: "

section "--: words after it are positional, so they may start with '-'"
expect 0 lockctl put "$P/neg" -- -5
expect 0 lockctl get "$P/neg" --print-value-only
same "$out" "-5"
expect 0 lockctl put -- "-$P/lead" --prefix
expect 0 lockctl get --print-value-only -- "-$P/lead"
same "$out" "--prefix"
expect 0 lockctl lock "$P/neg" -- echo still-a-command
same "$out" "still-a-command"
expect 0 lockctl lock -- "-$P/lock" -- echo dash-named
same "$out" "dash-named"
expect 2 lockctl lock -- "-$P/lock" echo missing-dashes
expect 2 lockctl put "$P/neg" -- -5 extra
# After "--", '-' is the value itself, not stdin.
expect 0 lockctl put "$P/dash" -- - <<<from-stdin
expect 0 lockctl get "$P/dash" --print-value-only
same "$out" "-"

section "snapshot save: a replica without a snapshot yet"
# First, while the new cell is far from its first snapshot (100 ops).
expect 4 lockctl snapshot save "$work/early.snap"
contains "$err" "Error: no_snapshot: this replica has no snapshot to serve yet"
one_line "$err"
[ ! -e "$work/early.snap" ] && [ ! -e "$work/early.snap.partial" ] || fail "a file was left behind"
expect 2 lockctl snapshot save
expect 2 lockctl snapshot load "$work/x.snap"

section "put, set, get, del in each format"
expect 0 lockctl put "$P/cfg/a" one
same "$out" "OK"
expect 0 lockctl set "$P/cfg/b" two
expect 0 lockctl -w json put "$P/cfg/c" three
rev_c=$(json_field "$out" '["revision"]')
[ "$rev_c" -gt 0 ] || fail "no revision in $out"
expect 0 lockctl get "$P/cfg/a"
same "$out" "$P/cfg/a
one"
expect 0 lockctl get "$P/cfg/c" --rev-only
same "$out" "$rev_c"
expect 0 lockctl get "$P/cfg/" --prefix --print-value-only
same "$out" "one
two
three"
expect 0 lockctl get "$P/cfg/" --prefix --keys-only
same "$out" "$P/cfg/a
$P/cfg/b
$P/cfg/c"
expect 0 lockctl -w json get "$P/cfg/a" --keys-only
same "$(json_field "$out" '["kvs"][0].get("value")')" "None"
expect 2 lockctl get "$P/cfg/a" --keys-only --print-value-only
expect 0 lockctl get "$P/cfg/" --prefix -w json
same "$(json_field "$out" '["count"]')" "3"
same "$(json_field "$out" '["kvs"][1]["value"]')" "two"
expect 0 lockctl get "$P/cfg/" --prefix --limit 2 --consistency s
same "$(printf '%s\n' "$out" | wc -l)" "4"
expect 0 lockctl -w table get "$P/cfg/" --prefix
contains "$out" "| KEY"
contains "$out" "| $P/cfg/b "
expect 1 lockctl get "$P/cfg/missing"
contains "$err" "Error: key_not_found: "
one_line "$err"
expect 1 lockctl put "$P/cfg/a" x --prev-revision 999999
contains "$err" "cas_mismatch"
expect 0 lockctl put "$P/cfg/a" uno --prev-revision "$(lockctl get "$P/cfg/a" --rev-only)"
expect 0 lockctl put "$P/cfg/new" v --prev-revision 0
expect 1 lockctl put "$P/cfg/new" v --prev-revision 0
expect 1 lockctl del "$P/cfg/a" --prev-revision 999999
expect 0 lockctl del "$P/cfg/a"
same "$out" "1"
# A key that is not there: nothing deleted, and no error (etcdctl's del, one key or a prefix).
expect 0 lockctl del "$P/cfg/a"
same "$out" "0"
[ -z "$err" ] || fail "deleting nothing printed an error: $err"
expect 0 lockctl -w json del "$P/cfg/a"
same "$(json_field "$out" '["deleted"]')" "0"
expect 0 lockctl -w json del "$P/cfg/" --prefix
same "$(json_field "$out" '["deleted"]')" "3"
expect 4 lockctl put "$P/big" "$(head -c 3000 /dev/zero | tr '\0' x)"
contains "$err" "too_large"
# A value no cell takes is too_large at once (it was unavailable after --command-timeout).
head -c 800000 /dev/zero | tr '\0' x >"$work/huge"
started_ms=$(date +%s%3N)
expect 4 lockctl --command-timeout 5s put "$P/huge" - <"$work/huge"
took_ms=$(($(date +%s%3N) - started_ms))
[ "$took_ms" -lt 3000 ] || fail "an 800 KB put took $took_ms ms to be refused"
contains "$err" "Error: too_large: "

section "values from stdin, binary ones included"
printf 'line one\nline two' | lockctl put "$P/stdin" - >/dev/null || fail "put from stdin"
expect 0 lockctl get "$P/stdin"
same "$out" "$P/stdin
line one
line two"
head -c 300 /dev/urandom >"$work/binary"
lockctl put "$P/bin" - <"$work/binary" >/dev/null || fail "binary put"
lockctl get "$P/bin" | tail -c +$(( ${#P} + 6 )) | head -c 300 >"$work/back"
cmp -s "$work/binary" "$work/back" || fail "binary value changed on the way"
expect 0 lockctl -w json get "$P/bin"
same "$(json_field "$out" '["kvs"][0]["encoding"]')" "base64"
# Bytes that look like UTF-8 but are not (a surrogate, an overlong '/'): base64 too, never an
# error of the JSON printer.
printf 'a\xed\xa0\x80b' | lockctl put "$P/surrogate" - >/dev/null || fail "put of a surrogate"
expect 0 lockctl -w json get "$P/surrogate"
same "$(json_field "$out" '["kvs"][0]["value"]')" "Ye2ggGI="
printf 'x\xc0\xafy' | lockctl put "$P/overlong" - >/dev/null || fail "put of an overlong form"
expect 0 lockctl -w json get "$P/overlong"
same "$(json_field "$out" '["kvs"][0]["encoding"]')" "base64"
# --print-value-only adds a newline, as etcdctl does; dropping it gives the exact bytes back.
lockctl get "$P/bin" --print-value-only | head -c -1 >"$work/exact"
cmp -s "$work/binary" "$work/exact" || fail "get --print-value-only | head -c -1 changed the value"

section "endpoints: the environment, a dead one first, none alive (exit 3)"
VOLTLOCK_ENDPOINTS="http://10.77.0.99:7480,$VL_TEST_ENDPOINTS" expect 0 lockctl --dial-timeout 300ms put "$P/env" x
expect 3 lockctl --endpoints http://10.77.0.99:7480 --dial-timeout 200ms --command-timeout 1s get k
contains "$err" "Error: unavailable: "
one_line "$err"
# A watch gives up at --command-timeout too (a connect in flight is cut at the deadline; it was
# the deadline plus a whole dial timeout).
started_ms=$(date +%s%3N)
expect 3 lockctl --endpoints http://10.77.0.99:7480 --dial-timeout 3s --command-timeout 1s watch k
took_ms=$(($(date +%s%3N) - started_ms))
[ "$took_ms" -lt 2000 ] || fail "watch with --command-timeout 1s gave up after $took_ms ms"
contains "$err" "Error: unavailable: "
one_line "$err"
start=$SECONDS
expect 3 env VOLTLOCK_ENDPOINTS=http://10.77.0.99:7480 "$LOCKCTL" --command-timeout 2s get k
[ $((SECONDS - start)) -le 4 ] || fail "--command-timeout 2s took $((SECONDS - start)) s"

section "cluster information"
expect 0 lockctl member list
same "$(printf '%s\n' "$out" | wc -l)" "3"
contains "$out" "leader"
expect 0 lockctl -w json member list
same "$(json_field "$out" '["members"].__len__()')" "3"
expect 0 lockctl -w table member list
contains "$out" "| REPLICA"
expect 0 lockctl endpoint status
same "$(printf '%s\n' "$out" | wc -l)" "3"
expect 0 lockctl -w table endpoint status
contains "$out" "normal"
expect 0 lockctl -w json endpoint health
same "$(printf '%s\n' "$out" | grep -c '"health":true')" "3"
expect 0 lockctl endpoint health
contains "$out" "is healthy"
expect 3 lockctl --endpoints "$VL_TEST_ENDPOINTS,http://10.77.0.99:7480" --dial-timeout 200ms endpoint health
contains "$out" "http://10.77.0.99:7480 is unhealthy"
expect 0 lockctl status
contains "$out" "normal"
expect 0 lockctl -w json status
same "$(json_field "$out" '["status"]')" "normal"
expect 0 lockctl -w table status

section "sessions by id"
expect 0 lockctl session grant --ttl 5s --name "$P-s"
sid=$out
expect 0 lockctl session keepalive "$sid" --once
contains "$out" "kept alive with TTL 5000ms"
expect 0 lockctl -w json session get "$sid"
same "$(json_field "$out" '["name"]')" "$P-s"
expect 0 lockctl session list
contains "$out" "$sid $P-s"
expect 0 lockctl put "$P/ephemeral" x --lease "$sid"
expect 0 lockctl session revoke "$sid"
expect 1 lockctl get "$P/ephemeral"
expect 1 lockctl session revoke "$sid"
contains "$err" "unknown_session"
expect 2 lockctl session grant
expect 2 lockctl session

section "lock: held until interrupted, busy, timed out, sequencer check"
"$LOCKCTL" lock "$P/held" >"$work/held.out" 2>"$work/held.err" &
holder=$!
background+=("$holder")
until_true 10 test -s "$work/held.out" || fail "lock did not print its sequencer"
seq=$(cat "$work/held.out")
contains "$seq" '"lock":"'"$P/held"'"'
expect 1 lockctl lock "$P/held" --wait 0
contains "$err" "lock_busy"
expect 1 lockctl lock "$P/held" --wait 500ms
contains "$err" "wait_timed_out"
# Ctrl-C during a wait gives up at once, as 128 + SIGINT, and leaves no wait in line (before,
# lockctl waited out the whole --wait and then said wait_timed_out).
waiting_for_held() { "$LOCKCTL" -w json session list | grep -q '"waiting_locks":\["'"$P/held"'"\]'; }
"$LOCKCTL" lock "$P/held" --wait 60s >"$work/waiter.out" 2>"$work/waiter.err" &
waiter=$!
background+=("$waiter")
until_true 10 waiting_for_held || fail "the second lock did not wait in line"
interrupted_at=$SECONDS
kill -INT "$waiter"
wait "$waiter"
same "$?" "130"
[ $((SECONDS - interrupted_at)) -le 2 ] || fail "the interrupted wait took $((SECONDS - interrupted_at)) s to end"
contains "$(cat "$work/waiter.err")" "interrupted"
[ -s "$work/waiter.out" ] && fail "the interrupted wait printed a sequencer"
no_wait_for_held() { ! waiting_for_held; }
until_true 5 no_wait_for_held || fail "the interrupted wait is still in line"
expect 0 lockctl sequencer check "$seq"
same "$out" "valid"
expect 0 lockctl put "$P/fenced" by-holder --sequencer "$seq"
VOLTLOCK_SEQUENCER=$seq expect 0 lockctl -w json sequencer check
kill -INT "$holder"
wait "$holder"
same "$?" "0"
expect 1 lockctl sequencer check "$seq"
same "$out" "invalid"
contains "$err" "sequencer_invalid"
expect 1 lockctl put "$P/fenced" late --sequencer "$seq"
contains "$err" "sequencer_invalid"
expect 2 lockctl sequencer check '{"lock": 3}'
expect 0 lockctl -w json lock "$P/json" -- true

section "lock -- COMMAND: never overlapping, growing tokens, the command's exit status"
: >"$work/overlap.log"
runner='echo "start $VOLTLOCK_SEQUENCER" >>'"$work"'/overlap.log; sleep 0.2; echo end >>'"$work"'/overlap.log'
pids=()
for i in 1 2 3 4; do
    "$LOCKCTL" lock "$P/mutex" --wait 30s -- sh -c "$runner" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "a lock -- sh run failed"; done
python3 - "$work/overlap.log" <<'EOF' || fail "runs overlapped or tokens did not grow"
import json, sys
lines = open(sys.argv[1]).read().split("\n")[:-1]
assert len(lines) == 8, lines
last = 0
for i in range(0, 8, 2):
    kind, seq = lines[i].split(" ", 1)
    assert kind == "start" and lines[i + 1] == "end", lines
    generation = json.loads(seq)["generation"]
    assert generation > last, (generation, last)
    last = generation
EOF
expect 7 lockctl lock "$P/status" -- sh -c 'exit 7'
expect 127 lockctl lock "$P/status" -- /no/such/program
contains "$err" "cannot run /no/such/program"
expect 2 lockctl get k -- echo nope

section "lock -- COMMAND: every SIGINT, SIGTERM and SIGHUP goes on to the command"
for signal in INT TERM HUP; do
    : >"$work/signals.log"
    "$LOCKCTL" lock "$P/signals" -- sh -c "n=0
        trap 'n=\$((n + 1)); echo $signal-\$n >>$work/signals.log' $signal
        echo ready >>$work/signals.log
        while [ \$n -lt 2 ]; do sleep 0.05; done
        exit 9" &
    runner=$!
    background+=("$runner")
    until_true 10 grep -q ready "$work/signals.log" || fail "the command did not start"
    kill -"$signal" "$runner"
    until_true 5 grep -q "$signal-1" "$work/signals.log" ||
        fail "the first SIG$signal did not arrive"
    kill -"$signal" "$runner"   # the same again: it was not passed on
    until_true 5 grep -q "$signal-2" "$work/signals.log" || {
        fail "the second SIG$signal did not arrive"
        kill -KILL "$runner"
    }
    wait "$runner"
    same "$?" "9"
done

section "lock -- COMMAND: kill -9 of lockctl takes the command and its children with it"
# ps, not kill -0: this system's init may leave the orphans' zombies unreaped.
alive() { local state; state=$(ps -o stat= -p "$1" 2>/dev/null) && [[ "$state" != Z* ]]; }
"$LOCKCTL" lock "$P/k9" --ttl 2s -- \
    sh -c "sleep 60 & echo \$! >$work/k9.child; echo \$\$ >$work/k9.pid; wait" &
runner=$!
background+=("$runner")
until_true 10 test -s "$work/k9.pid" || fail "the command did not start"
kill -KILL "$runner"
command_gone() { ! alive "$(cat "$work/k9.pid")" && ! alive "$(cat "$work/k9.child")"; }
until_true 5 command_gone || fail "the command or its child outlived lockctl's kill -9"
# The lock is free again once the killed lockctl's session expires (its TTL, 2 s).
expect 0 lockctl lock "$P/k9" --wait 10s -- echo next-holder
same "$out" "next-holder"

section "lock -- COMMAND on a terminal: the command reads it, and Ctrl-C reaches it once"
# As with flock(1): lockctl hands the terminal's foreground to the command's process group.
python3 - "$LOCKCTL" "$P/tty" <<'EOF' || fail "an interactive command did not work under lock"
import os, pty, select, sys, time

def run(command, typed, expect_text, expect_status):
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.argv[1], [sys.argv[1], "lock", sys.argv[2], "--", "sh", "-c", command])
    seen = b""
    def read_until(text):
        nonlocal seen
        deadline = time.monotonic() + 10
        while text not in seen:
            ready, _, _ = select.select([fd], [], [], max(0, deadline - time.monotonic()))
            assert ready, f"no {text!r} within 10 s; the terminal showed {seen!r}"
            seen += os.read(fd, 1024)
    read_until(b"ready")
    os.write(fd, typed)
    read_until(expect_text)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == expect_status, (status, seen)
    assert b"interrupted" not in seen, seen   # lockctl itself was not interrupted
    os.close(fd)

run("echo ready; read line; echo got-$line", b"hello\n", b"got-hello", 0)
run("trap 'echo trapped-once; exit 5' INT; echo ready; read line", b"\x03", b"trapped-once", 5)
EOF

section "lock -- COMMAND: the session lost stops the command; exit 1 whatever it returns"
# The command exits 0 on the SIGTERM it gets: the loss must still show in lockctl's status.
"$LOCKCTL" lock "$P/lost" --ttl 2s --kill-grace 1s -- \
    sh -c "trap 'exit 0' TERM; echo \$\$ >$work/cmd.pid; while :; do sleep 0.1; done" \
    2>"$work/lost.err" &
runner_pid=$!
background+=("$runner_pid")
until_true 10 test -s "$work/cmd.pid" || fail "the command did not start"
for r in 0 1 2; do cell partition "$r" --peers client; done
cut_at=$SECONDS
wait "$runner_pid"
status=$?
cell heal
same "$status" "1"
[ $((SECONDS - cut_at)) -le 6 ] || fail "the command was stopped $((SECONDS - cut_at)) s after the cut"
contains "$(cat "$work/lost.err")" "Error: session_lost: "
alive "$(cat "$work/cmd.pid")" && fail "the command outlived the session"

section "lock -- COMMAND: a 4 s session survives its leader cut off from everything"
# A new leader is elected in about 1.5 s; the keepalive at the silent old leader used to wait
# 3 s for an answer, past the 2.7 s left of the lease (exit 1, session_lost).
"$LOCKCTL" lock "$P/failover" --ttl 4s -- \
    sh -c "echo \"\$VOLTLOCK_SEQUENCER\" >$work/failover.seq; until [ -e $work/failover.done ]; do
        sleep 0.1; done" 2>"$work/failover.err" &
runner=$!
background+=("$runner")
until_true 10 test -s "$work/failover.seq" || fail "the command did not start"
leader=$(lockctl -w json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])')
cell partition "$leader"
cut_ms=$(date +%s%3N)
# Past two TTLs of the cut, the grant is still current, checked throughout.
while [ $(($(date +%s%3N) - cut_ms)) -lt 6000 ]; do
    lockctl --dial-timeout 500ms --command-timeout 20s sequencer check \
        "$(cat "$work/failover.seq")" >/dev/null ||
        { fail "the lock's grant ended after the leader was cut off"; break; }
done
touch "$work/failover.done"
wait "$runner"
same "$?" "0"
[ -s "$work/failover.err" ] && fail "lockctl said: $(cat "$work/failover.err")"
cell heal
cell wait

section "barrier"
"$LOCKCTL" barrier "$P/b" --count 2 --wait 20s >"$work/b1" &
b1=$!
expect 0 lockctl barrier "$P/b" --count 2 --wait 20s
same "$out" "passed"
wait "$b1" || fail "the other barrier member failed"
expect 1 lockctl barrier "$P/b2" --count 2 --wait 500ms
contains "$err" "wait_timed_out"
expect 2 lockctl barrier "$P/b3"

section "watch across a leader kill -9: no gap, no duplicate"
"$LOCKCTL" -w json watch "$P/w/" --prefix >"$work/watch.out" 2>"$work/watch.err" &
watcher=$!
background+=("$watcher")
sleep 0.5
leader=$(lockctl -w json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])')
: >"$work/acked"
for i in $(seq 1 60); do
    if [ "$i" -eq 20 ]; then cell kill "$leader"; fi
    lockctl --command-timeout 20s put "$P/w/k" "$i" >/dev/null && echo "$i" >>"$work/acked"
done
until_true 20 grep -q '"value":"60"' "$work/watch.out" || fail "the watch did not reach the last write"
kill -INT "$watcher"
wait "$watcher" || fail "watch did not exit 0 on SIGINT"
python3 - "$work/watch.out" "$work/acked" <<'EOF' || fail "the watch missed or repeated events"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
values = [e["value"] for e in events]
acked = open(sys.argv[2]).read().split()
assert values == [str(i) for i in range(1, 61)], values
assert acked == values, (acked, values)
revisions = [e["revision"] for e in events]
assert revisions == sorted(set(revisions)), revisions
EOF
cell start "$leader"
cell wait

section "elect: the winner killed, the other takes over"
"$LOCKCTL" elect "$P/e" alpha --ttl 2s >"$work/alpha" &
alpha=$!
background+=("$alpha")
until_true 10 grep -q alpha "$work/alpha" || fail "alpha did not win an empty election"
"$LOCKCTL" elect "$P/e" beta --ttl 2s >"$work/beta" &
beta=$!
background+=("$beta")
"$LOCKCTL" elect "$P/e" --listen >"$work/listen" &
listener=$!
background+=("$listener")
until_true 10 grep -q alpha "$work/listen" || fail "the listener did not print the leader"
sleep 0.5
[ -s "$work/beta" ] && fail "beta won while alpha led"
two_in_line_for_e() {
    [ "$("$LOCKCTL" -w json session list | grep -o '"waiting_locks":\["'"$P/e"'"\]' | wc -l)" -eq 2 ]
}
# A third campaigner, interrupted while in line, goes at once (128 + SIGINT).
"$LOCKCTL" elect "$P/e" gamma --ttl 2s >"$work/gamma" 2>"$work/gamma.err" &
gamma=$!
background+=("$gamma")
until_true 10 two_in_line_for_e || fail "beta and gamma are not both in line"
kill -INT "$gamma"
wait "$gamma"
same "$?" "130"
contains "$(cat "$work/gamma.err")" "interrupted"
# Campaigners keep their places in line: delta, in line after beta, leads after beta.
"$LOCKCTL" elect "$P/e" delta --ttl 2s >"$work/delta" &
delta=$!
background+=("$delta")
until_true 10 two_in_line_for_e || fail "beta and delta are not both in line"
kill -KILL "$alpha"
until_true 15 grep -q beta "$work/beta" || fail "beta did not take over after alpha died"
until_true 10 grep -q beta "$work/listen" || fail "the listener did not see beta"
[ -s "$work/delta" ] && fail "delta, in line after beta, won first"
kill -INT "$beta"
wait "$beta" || fail "elect did not exit 0 on SIGINT"
until_true 10 grep -q delta "$work/delta" || fail "delta did not take over after beta resigned"
until_true 10 grep -q delta "$work/listen" || fail "the listener did not see delta"
kill -INT "$delta" "$listener"
wait "$delta" || fail "elect did not exit 0 on SIGINT"
wait "$listener"

section "snapshot save: a backup that voltlockd --import-snapshot restores"
marker="$P-snapshot-marker-$RANDOM"
expect 0 lockctl put "$P/snap/marker" "$marker"
# The replicas snapshot every 100 ops: write until the first endpoint's newest snapshot holds
# the marker (the state machine keeps keys and values as they are, so the bytes show it).
snapshot_has_marker() {
    for i in $(seq 1 20); do "$LOCKCTL" put "$P/snap/fill" "$i" >/dev/null || return 1; done
    "$LOCKCTL" snapshot save "$work/backup.snap" >/dev/null 2>&1 &&
        grep -aq -- "$marker" "$work/backup.snap"
}
until_true 120 snapshot_has_marker || fail "no snapshot with the marker key was saved"
expect 0 lockctl -w json snapshot save "$work/backup.snap"
op=$(json_field "$out" '["op"]')
size=$(json_field "$out" '["size"]')
same "$(json_field "$out" '["file"]')" "$work/backup.snap"
[ "$op" -gt 0 ] || fail "no op in $out"
same "$(stat -c %s "$work/backup.snap")" "$size"
[ ! -e "$work/backup.snap.partial" ] || fail "the temporary file was left behind"
# It holds every key and the token hashes: 0600, whatever the umask, even over a 0644 file.
same "$(stat -c %a "$work/backup.snap")" 600
install -m 0644 /dev/null "$work/simple.snap"
install -m 0644 /dev/null "$work/simple.snap.partial"  # a failed run's
expect 0 lockctl snapshot save "$work/simple.snap"
same "$(stat -c %a "$work/simple.snap")" 600
contains "$out" "saved to $work/simple.snap"
# One endpoint given: that replica's snapshot; a dead one alone: unreachable, exit 3.
one_endpoint=${VL_TEST_ENDPOINTS##*,}
expect 0 lockctl --endpoints "$one_endpoint" snapshot save "$work/last.snap"
expect 3 lockctl --endpoints http://127.0.0.1:9 --dial-timeout 500ms snapshot save "$work/dead.snap"
[ ! -e "$work/dead.snap" ] || fail "a file was written without a snapshot"
expect 2 lockctl snapshot save "$work/no/such/dir/x.snap"
contains "$err" "cannot create"
# The restore, as the README's "Restore" does it: into a new, empty data directory.
replica_config="$VL_TEST_CELL_STATE/r1/config.json"
restore() { "$VOLTLOCKD" --config "$replica_config" --data-dir "$1" --import-snapshot "$2"; }
restore "$work/restored" "$work/backup.snap" >"$work/import.log" 2>&1 ||
    fail "voltlockd --import-snapshot refused the saved file: $(tail -3 "$work/import.log")"
grep -q "imported the snapshot of op $op" "$work/import.log" ||
    fail "the import did not name op $op: $(tail -3 "$work/import.log")"
restore "$work/restored-last" "$work/last.snap" >/dev/null 2>&1 ||
    fail "voltlockd --import-snapshot refused the file saved from $one_endpoint"
# Byte for byte what voltlockd --export-snapshot writes: replica 2 stopped, its data directory
# exported, then restarted; it serves the snapshot it restarted from until it writes a newer one.
r2_endpoint=$(cut -d, -f3 <<<"$VL_TEST_ENDPOINTS")
cell stop 2
"$VOLTLOCKD" --config "$VL_TEST_CELL_STATE/r2/config.json" \
    --export-snapshot "$work/exported.snap" >"$work/export.log" 2>&1 ||
    fail "voltlockd --export-snapshot failed: $(tail -3 "$work/export.log")"
cell start 2
save_r2() { "$LOCKCTL" --endpoints "$r2_endpoint" --dial-timeout 500ms -w json \
    snapshot save "$work/r2.snap" >"$work/r2.json" 2>/dev/null; }
until_true 30 save_r2 || fail "no snapshot saved from the restarted $r2_endpoint"
exported_op=$(sed -n 's/.*exported the snapshot of op \([0-9]*\).*/\1/p' "$work/export.log")
saved_op=$(json_field "$(cat "$work/r2.json")" '["op"]')
if [ "$saved_op" == "$exported_op" ]; then
    cmp -s "$work/exported.snap" "$work/r2.snap" ||
        fail "snapshot save and --export-snapshot wrote different files for op $saved_op"
    echo "   op $saved_op: snapshot save and --export-snapshot wrote the same bytes"
else
    echo "   the restarted replica wrote a newer snapshot (op $saved_op) before the save"
    [ "$saved_op" -gt "$exported_op" ] ||
        fail "the restarted replica served op $saved_op, older than the exported $exported_op"
fi
# The import does check: a damaged copy (one byte flipped mid-file) is refused.
cp "$work/backup.snap" "$work/damaged.snap"
printf '\xff' | dd of="$work/damaged.snap" bs=1 seek=$((size / 2)) conv=notrunc status=none
cmp -s "$work/backup.snap" "$work/damaged.snap" && {
    printf '\x00' | dd of="$work/damaged.snap" bs=1 seek=$((size / 2)) conv=notrunc status=none; }
restore "$work/restored-damaged" "$work/damaged.snap" >/dev/null 2>&1 &&
    fail "voltlockd --import-snapshot accepted a damaged snapshot"

section "completion"
expect 0 lockctl completion bash
bash -c "$out"$'\n'"complete -p lockctl" >/dev/null || fail "the completion script does not load"
contains "$out" "snapshot"
expect 0 lockctl completion zsh
contains "$out" "#compdef lockctl"
# It loads under zsh's own completion system and registers itself for lockctl.
zsh_check='autoload -U compinit; compinit -u; source <("$LOCKCTL" completion zsh); [[ ${_comps[lockctl]} == _lockctl ]]'
LOCKCTL=$LOCKCTL HOME=$work zsh -f -c "$zsh_check" >/dev/null 2>&1 ||
    fail "the zsh completion script does not load: $(HOME=$work zsh -f -c "$zsh_check" 2>&1 | tail -2)"
expect 2 lockctl completion fish

finish "lockctl tests"
