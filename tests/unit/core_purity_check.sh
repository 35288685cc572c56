#!/usr/bin/env bash
# core_purity_check.sh DIR
#
# The replication core is a pure state machine (STYLE.md, "Functional core, event-loop shell";
# etcd-io/raft; TigerBeetle's `tidy`): input in, effects out. This check fails if any C/C++
# source under DIR opens a socket or a file, reads a clock or the environment, starts a thread,
# takes a lock or draws randomness. Each hit is printed as `path:line: [rule] code`.
#
# Comments are stripped before matching (string literals are kept, and a `//` inside one is not
# taken for a comment). Names the core legitimately uses, such as the method `send(` or
# `RegisterMachine::write_op(`, do not match: the call-shaped rules skip member calls, qualified
# names and longer identifiers.
#
# Exit status: 0 clean, 1 impure code found, 2 usage error or nothing to check.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$1
if [[ ! -d $dir ]]; then
    echo "core_purity_check: $dir: not a directory" >&2
    exit 2
fi

# ---- Rules: a name, and Perl-compatible regexes (grep -P) that break it ------------------------
rule_names=()
declare -A rule_pattern
rule() {
    local name=$1 pattern=$2
    if [[ -z ${rule_pattern[$name]+set} ]]; then
        rule_names+=("$name")
        rule_pattern[$name]="(?:$pattern)"
    else
        rule_pattern[$name]+="|(?:$pattern)"
    fi
}

# A call of the free function NAME(...), bare, `::NAME(` or `std::NAME(`; not a member call
# (`obj.NAME(`, `p->NAME(`), another qualified name (`Replica::NAME(`) or a longer identifier.
free_call() { printf '%s' '(?:(?<![\w.>:])|(?<![\w>])::|\bstd::)' "(?:$1)" '\s*\('; }
# An #include of one of the headers.
include() { printf '%s' '#\s*include\s*[<"]' "(?:$1)" '[>"]'; }

rule socket      "$(free_call 'socket|socketpair|recvmmsg|sendmmsg|recvmsg|sendmsg')"
rule socket      "$(free_call 'recvfrom|sendto')"
rule socket      "$(free_call 'poll|ppoll|select|pselect')"
rule socket      '\b(?:epoll|io_uring)_\w+'
rule socket      "$(include 'sys/socket\.h|netinet/[^>"]*|arpa/inet\.h|netdb\.h')"
rule socket      "$(include 'sys/epoll\.h|poll\.h')"
rule file        "$(free_call 'open|openat|creat|fopen|freopen|fdopen|tmpfile|mmap')"
rule file        "$(free_call 'read|write|pread|pwrite|readv|writev|close|fsync|fdatasync|unlink')"
rule file        '\bstd::(?:ifstream|ofstream|fstream|filesystem)\b'
rule file        "$(include 'fstream|filesystem|fcntl\.h|unistd\.h|sys/mman\.h|sys/stat\.h')"
rule clock       '\b(?:std::)?chrono::'
rule clock       '\b\w*clock::now\b'
rule clock       '\btimerfd_\w+'
rule clock       "$(free_call 'time|clock|gettimeofday|clock_gettime|timespec_get')"
rule clock       "$(free_call 'localtime|gmtime')"
rule clock       "$(include 'chrono|ctime|time\.h|sys/time\.h|sys/timerfd\.h')"
rule randomness  '\bstd::(?:random_device|mt19937(?:_64)?|minstd_rand0?|default_random_engine)\b'
rule randomness  "$(free_call 'rand|srand|rand_r|random|srandom|drand48|lrand48')"
rule randomness  "$(free_call 'getrandom|arc4random\w*')"
rule randomness  "$(include 'random|sys/random\.h')"
rule environment '\b(?:secure_)?getenv\b'
rule environment "$(free_call 'setenv|unsetenv|putenv')"
rule thread      '\bstd::(?:thread|jthread|async|this_thread|mutex|shared_mutex|recursive_mutex)\b'
rule thread      '\bstd::(?:timed_mutex|lock_guard|unique_lock|scoped_lock|condition_variable)\b'
rule thread      '\bstd::(?:atomic\w*|counting_semaphore|binary_semaphore|latch|barrier)\b'
rule thread      "$(free_call 'pthread_\w+|fork')"
rule thread      "$(include 'thread|future|mutex|shared_mutex|condition_variable|atomic|semaphore')"
rule thread      "$(include 'latch|barrier|stdatomic\.h|pthread\.h')"

# A pattern grep cannot compile would match nothing and pass everything: refuse to run instead.
for name in "${rule_names[@]}"; do
    status=0
    grep -qP -- "${rule_pattern[$name]}" <<<"" || status=$?
    if [[ $status -gt 1 ]]; then
        echo "core_purity_check: rule [$name] does not compile" >&2
        exit 2
    fi
done

# ---- Sources -----------------------------------------------------------------------------------

# Blanks out every comment and keeps line numbers. String and character literals are skipped
# over whole, so the `//` in "http://" or the `/*` in '/*' starts no comment.
read -r -d '' strip_comments_program <<'PERL' || true
s{ ( "(?:[^"\\\n]|\\.)*" | (?<!\w)'(?:[^'\\\n]|\\.)*' )
 | ( /\*.*?\*/ )
 | ( //[^\n]* ) }
 { defined $1 ? $1 : defined $2 ? ($2 =~ tr/\n//cdr) : "" }gsex;
PERL
strip_comments() { perl -0777 -pe "$strip_comments_program" "$1"; }

mapfile -d '' files < <(find "$dir" -type f \( -name '*.h' -o -name '*.hh' -o -name '*.hpp' \
    -o -name '*.c' -o -name '*.cc' -o -name '*.cpp' -o -name '*.cxx' -o -name '*.inc' \) \
    -print0 | sort -z)
if [[ ${#files[@]} -eq 0 ]]; then
    echo "core_purity_check: no C/C++ sources under $dir" >&2
    exit 2
fi

hits=0
for file in "${files[@]}"; do
    stripped=$(strip_comments "$file")
    for name in "${rule_names[@]}"; do
        while IFS= read -r hit; do
            line=${hit%%:*}
            code=${hit#*:}
            code=${code#"${code%%[![:space:]]*}"}  # trim leading blanks
            printf '%s:%s: [%s] %s\n' "$file" "$line" "$name" "$code"
            hits=$((hits + 1))
        done < <(grep -nP -- "${rule_pattern[$name]}" <<<"$stripped" || true)
    done
done

if [[ $hits -gt 0 ]]; then
    echo "core_purity_check: $hits impure line(s) under $dir: the core does no I/O, reads no" \
         "clock, starts no thread and draws no randomness; the shell does that and passes" \
         "the result in (STYLE.md)." >&2
    exit 1
fi
echo "core_purity_check: ${#files[@]} files under $dir are pure"
