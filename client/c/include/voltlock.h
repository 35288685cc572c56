/* voltlock.h: the C client of Voltlock (libvoltlock). C11; no C++ in this header.
 *
 * Conventions
 * - Opaque handles: vl_client (one per cell, shared by threads), vl_session (a lease with its
 *   locks; shared by threads too), vl_watch (one reader thread at a time).
 * - Every call returns a vl_status; VL_OK is 0. Results come back through out-params, which are
 *   always last. Anything the library allocates for the caller has its own vl_*_free.
 * - The text of the last error is on the handle the call was made on:
 *   vl_client_errstr(c) for calls taking a client, vl_session_errstr(s) for calls taking a
 *   session, vl_watch_errstr(w) for a watch. It is valid until the next call on that handle from
 *   the same thread (each thread has its own slot on the handle), and names the server's code
 *   and message when the server answered.
 * - A NULL handle is never dereferenced: calls answer VL_ERR_INVALID_ARGUMENT, frees and closes
 *   do nothing, and getters answer 0, NULL, or (the errstr calls) a text that says so.
 * - Arguments are checked before anything is sent: a bad one (a NULL or malformed name, a flag
 *   bit or an index the call does not define) answers VL_ERR_INVALID_ARGUMENT and sends nothing.
 * - No global state: nothing to initialise, no signal handlers installed. The library ignores
 *   SIGPIPE on its own sockets (MSG_NOSIGNAL).
 *
 * Blocking: every call that talks to the cell has a deadline. Plain calls give up after the
 * client's command_timeout_ms (default 10 s) across every retry and endpoint, then answer
 * VL_ERR_TIMEOUT (or the last failure seen). Calls with a wait_ms wait up to wait_ms plus
 * command_timeout_ms. No call blocks for ever. Connecting to one endpoint takes at most
 * dial_timeout_ms (default 2 s) before the next one is tried.
 *
 * Retries: requests that change state carry X-Voltlock-Client-Id and X-Voltlock-Request-Number,
 * so a request whose answer was lost (a connection reset, a leader killed, a 503) is sent again,
 * at any endpoint, and the cell applies it at most once. Endpoints are tried from the one that
 * last answered (or the leader the cell named) round the list.
 */
#ifndef VOLTLOCK_H
#define VOLTLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define VL_API __attribute__((visibility("default")))
#else
#define VL_API
#endif

#define VL_VERSION_MAJOR 0
#define VL_VERSION_MINOR 2
#define VL_VERSION_PATCH 0
/* "0.2.0": the library's own version, which may differ from the header's if linked late. */
VL_API const char *vl_version(void);

/* One value per server error code (docs/api.md), plus what the client itself can fail with.
 * Values are never renumbered. */
typedef enum vl_status {
    VL_OK = 0,
    /* Client side. */
    VL_ERR_INVALID_ARGUMENT = 1, /* a bad argument to the library call; nothing was sent */
    VL_ERR_TRANSPORT = 2,        /* no endpoint could be reached or answered sensibly */
    VL_ERR_TIMEOUT = 3,          /* the call's deadline passed (or vl_watch_next had no event) */
    VL_ERR_SESSION_LOST = 4,     /* the session's lease ran out or the cell ended it */
    VL_ERR_NO_MEMORY = 5,
    VL_ERR_PROTOCOL = 6,         /* the server's answer was not what docs/api.md describes */
    VL_ERR_CLOSED = 7,           /* ended by vl_watch_close or vl_session_interrupt */
    /* Server codes, as in docs/api.md's error table. */
    VL_ERR_BAD_JSON = 20,
    VL_ERR_UNKNOWN_FIELD = 21,
    VL_ERR_SERVER_INVALID_ARGUMENT = 22,
    VL_ERR_UNKNOWN_SESSION = 23,
    VL_ERR_KEY_NOT_FOUND = 24,
    VL_ERR_BARRIER_NOT_FOUND = 25,
    VL_ERR_NOT_FOUND = 26,
    VL_ERR_WAIT_TIMED_OUT = 27,
    VL_ERR_CAS_MISMATCH = 28,
    VL_ERR_SEQUENCER_INVALID = 29,
    VL_ERR_LOCK_BUSY = 30,
    VL_ERR_BARRIER_NOT_READY = 31,
    VL_ERR_MODE_CONFLICT = 32,
    VL_ERR_NOT_HELD = 33,
    VL_ERR_NOT_MEMBER = 34,
    VL_ERR_COUNT_MISMATCH = 35,
    VL_ERR_BARRIER_IN_USE = 36,
    VL_ERR_WAIT_WITHDRAWN = 37,
    VL_ERR_REQUEST_NUMBER_REUSED = 38,
    VL_ERR_REQUEST_NUMBER_STALE = 39,
    VL_ERR_COMPACTED = 40,
    VL_ERR_TOO_LARGE = 41,
    VL_ERR_NOT_LOCK_SERVICE = 42,
    VL_ERR_UNAVAILABLE = 43,
    VL_ERR_NOT_LEADER = 44,
    VL_ERR_WAIT_OUTCOME_UNKNOWN = 45,
    VL_ERR_NOT_READY = 46,
    VL_ERR_SERVER_OTHER = 47,    /* a code this library does not know; the text says which */
    VL_ERR_UNAUTHENTICATED = 48, /* 401: no token (or certificate), or one the cell doesn't know */
    VL_ERR_PERMISSION_DENIED = 49, /* 403: the identity lacks a permission (the text says which) */
    VL_ERR_QUOTA_EXCEEDED = 50     /* 507: the cell's records reached its quota_bytes */
} vl_status;

/* The stable name of a status: "ok", "key_not_found", "timeout", ... (static storage). */
VL_API const char *vl_status_name(vl_status status);

typedef struct vl_client vl_client;
typedef struct vl_session vl_session;
typedef struct vl_watch vl_watch;

/* Frees a string the library returned (vl_sequencer_format, vl_info_get). NULL is fine. */
VL_API void vl_string_free(char *s);

/* ---- Client ------------------------------------------------------------------------------- */

typedef struct vl_client_options {
    uint32_t dial_timeout_ms;    /* connecting to one endpoint; 0: 2,000 */
    uint32_t command_timeout_ms; /* one call, every retry included; 0: 10,000 */
    uint64_t client_id_seed;     /* 0: random; else the first X-Voltlock-Client-Id (tests) */
    /* https:// endpoints (docs/security-tls.md). NULL: $VOLTLOCK_CACERT, $VOLTLOCK_CERT,
     * $VOLTLOCK_KEY, else none. The replica's certificate is checked against cacert_file (else
     * the system's CAs) and its address; TLS 1.2 or newer. vl_client_open checks the files
     * (each readable and of its kind, cert_file and key_file given together and matching). */
    const char *cacert_file; /* PEM: the cell's CA */
    const char *cert_file;   /* PEM: a client certificate, for a cell that requires one */
    const char *key_file;    /* PEM: its key (unencrypted) */
    /* A bearer token for a cell with auth on (docs/security-auth.md), sent as
     * `Authorization: Bearer`. NULL: $VOLTLOCK_TOKEN, else none. */
    const char *token;
} vl_client_options;

/* Fills in the defaults. opts may also be NULL wherever options are taken. */
VL_API void vl_client_options_init(vl_client_options *opts);

/* endpoints: comma-separated base URLs, "http://10.77.0.10:7480,http://10.77.0.11:7480"
 * or "https://..." (a missing scheme is http://; one scheme for all). NULL: $VOLTLOCK_ENDPOINTS
 * (the fallback every Voltlock client shares), else "http://127.0.0.1:7480". Does not connect: the
 * first call does. On failure *out is NULL and the reason is in errstr_out, if given (a buffer of
 * errstr_len bytes), since there is no handle to hold it: VL_ERR_INVALID_ARGUMENT for a bad
 * endpoint list or TLS file, the reason naming the option (or environment variable) and file. */
VL_API vl_status vl_client_open(const char *endpoints, const vl_client_options *opts,
                                char *errstr_out, size_t errstr_len, vl_client **out);
/* Closes every connection and frees the client. Sessions and watches opened on it must be
 * closed first. NULL is fine. */
VL_API void vl_client_close(vl_client *c);
VL_API const char *vl_client_errstr(const vl_client *c);
/* The endpoint that answered the last request (a URL; valid until vl_client_close); NULL for a
 * NULL client. */
VL_API const char *vl_client_current_endpoint(const vl_client *c);

/* ---- Sessions ----------------------------------------------------------------------------- */

/* Called at most once per session when the session is lost: its lease ran out on the client's
 * clock before a keepalive was answered, or the cell said the session no longer exists. It runs
 * on the session's keepalive thread, or on the thread whose call on the session found out
 * first. `why` is VL_ERR_SESSION_LOST or VL_ERR_UNKNOWN_SESSION.
 * Every lock of the session must be taken as gone from that moment. The callback must not call
 * vl_session_close on this session (it may call anything else, or signal another thread). */
typedef void (*vl_session_lost_fn)(vl_session *s, vl_status why, void *user_data);

typedef struct vl_session_options {
    uint32_t lock_delay_ms;            /* 0: none */
    const char *name;                  /* NULL: none; up to 128 bytes */
    vl_session_lost_fn on_session_lost; /* NULL: learn it from calls and vl_session_status */
    void *user_data;
} vl_session_options;

VL_API void vl_session_options_init(vl_session_options *opts);

/* Creates a session with a lease of ttl_ms (1 s to 24 h) and starts its keepalive thread.
 * The lease rule (docs/c-library.md): a lease counts from when its keepalive was *sent*; a
 * keepalive goes every ttl/3, and after a failure every 100 ms, each to the next endpoint,
 * until one is answered or the lease has run out on the client's clock. Then the session is
 * lost: the callback runs, and every later call on the session answers VL_ERR_SESSION_LOST.
 * Blocks up to command_timeout_ms. */
VL_API vl_status vl_session_open(vl_client *c, uint32_t ttl_ms, const vl_session_options *opts,
                                 vl_session **out);
/* Stops the keepalive thread, ends the session at the cell (releasing its locks and deleting
 * its ephemeral keys) and frees it. Blocks up to dial_timeout_ms (a keepalive connecting when
 * it is called) plus command_timeout_ms. Returns VL_OK also when the
 * session was already lost (nothing to end), otherwise the reason the end was not confirmed
 * (the session then expires by its TTL). NULL is fine. */
VL_API vl_status vl_session_close(vl_session *s);
/* Ends the calls on s that other threads are making now (a lock or barrier wait, a release):
 * each answers VL_ERR_CLOSED at once, its connection closed, and the cell withdraws a wait whose
 * client hung up. Calls made after it run as usual, and the session stays open. A wait the cell
 * granted just as it was interrupted leaves the lock held by the session: release it, or close
 * the session. For a program's Ctrl-C (from a thread that watches a flag the signal handler
 * sets; this call takes a mutex, so not from the handler itself). Never blocks for long. */
VL_API void vl_session_interrupt(vl_session *s);
/* Session id as the cell knows it. */
VL_API uint64_t vl_session_id(const vl_session *s);
/* VL_OK while the lease holds on the client's clock; VL_ERR_SESSION_LOST (or
 * VL_ERR_UNKNOWN_SESSION) once it has not. Never blocks. */
VL_API vl_status vl_session_status(const vl_session *s);
/* Milliseconds the lease certainly has left on the client's clock (0 if lost). Never blocks. */
VL_API uint64_t vl_session_lease_remaining_ms(const vl_session *s);
VL_API const char *vl_session_errstr(const vl_session *s);

/* Sessions by id, for tools (lockctl session grant|keepalive|revoke): a session with no
 * keepalive thread (it lives ttl_ms unless kept alive by id), one keepalive, or the end of a
 * session this process may not own. */
VL_API vl_status vl_session_grant_id(vl_client *c, uint32_t ttl_ms, const char *name,
                                     uint64_t *session_id_out);
VL_API vl_status vl_session_keepalive_id(vl_client *c, uint64_t session_id, uint32_t *ttl_ms_out);
VL_API vl_status vl_session_revoke_id(vl_client *c, uint64_t session_id);

/* ---- Locks and sequencers ----------------------------------------------------------------- */

typedef enum vl_lock_mode { VL_LOCK_EXCLUSIVE = 0, VL_LOCK_SHARED = 1 } vl_lock_mode;

/* A fencing token: the grant of `lock` in `mode` to `session`, numbered `generation`. */
typedef struct vl_sequencer {
    char *lock;
    vl_lock_mode mode;
    uint64_t generation;
    uint64_t session;
} vl_sequencer;

VL_API void vl_sequencer_free(vl_sequencer *seq);
/* The sequencer as the JSON object the API takes, one line, keys sorted:
 * {"generation":1,"lock":"db/primary","mode":"exclusive","session":1}. Free with
 * vl_string_free. */
VL_API vl_status vl_sequencer_format(const vl_sequencer *seq, char **out);
/* The reverse of vl_sequencer_format: a JSON object with those four fields and no other; lock
 * a lock name (1 to 512 bytes of UTF-8 text without control characters), generation and
 * session JSON integers from 0 to 2^64-1 (not -1, not 1.5), mode "exclusive" or "shared";
 * anything else is VL_ERR_INVALID_ARGUMENT. */
VL_API vl_status vl_sequencer_parse(const char *text, vl_sequencer **out);
/* Asks the cell whether seq is still the lock's current grant: *valid_out true or false. */
VL_API vl_status vl_sequencer_check(vl_client *c, const vl_sequencer *seq, bool *valid_out);

/* Acquires lock `name`. wait_ms 0: answer VL_ERR_LOCK_BUSY at once if it is taken; else wait in
 * line up to wait_ms (at most an hour), then VL_ERR_WAIT_TIMED_OUT. Blocks up to wait_ms +
 * command_timeout_ms; a wait survives a leader change. If the session is lost meanwhile the call
 * answers VL_ERR_SESSION_LOST. seq_out may be NULL. */
VL_API vl_status vl_lock_acquire(vl_session *s, const char *name, vl_lock_mode mode,
                                 uint32_t wait_ms, vl_sequencer **seq_out);
/* Releases the session's hold on `name` (or withdraws its wait): VL_ERR_NOT_HELD if neither. */
VL_API vl_status vl_lock_release(vl_session *s, const char *name);

/* ---- Key-value ---------------------------------------------------------------------------- */

typedef struct vl_kv {
    char *key;
    uint8_t *value; /* value_len bytes, plus a NUL the length does not count */
    size_t value_len;
    uint64_t create_revision;
    uint64_t mod_revision;
    uint64_t version;
    uint64_t session; /* the owner of an ephemeral key, else 0 */
} vl_kv;

VL_API void vl_kv_free(vl_kv *kv);

typedef struct vl_kv_list {
    vl_kv *kvs;
    size_t count;
    bool more;        /* another page follows: ask again with after = next_after */
    char *next_after; /* NULL when !more */
    uint64_t revision;
} vl_kv_list;

VL_API void vl_kv_list_free(vl_kv_list *list);

typedef enum vl_read_flags {
    VL_READ_LINEARIZABLE = 0, /* through the log: sees everything committed before the call */
    VL_READ_STALE = 1         /* from the replica asked, possibly behind */
} vl_read_flags;

/* One key. VL_ERR_KEY_NOT_FOUND if absent. flags (here and in every read that takes them):
 * VL_READ_LINEARIZABLE or VL_READ_STALE; other bits are VL_ERR_INVALID_ARGUMENT. */
VL_API vl_status vl_get(vl_client *c, const char *key, int flags, vl_kv **out);
/* One page of the keys starting with prefix, in key order, after key `after` (NULL: from the
 * start), at most `limit` (0: as many as fit one page). */
VL_API vl_status vl_get_prefix(vl_client *c, const char *prefix, const char *after,
                               uint32_t limit, int flags, vl_kv_list **out);

typedef struct vl_put_options {
    bool check_prev_revision; /* apply only if the key's mod_revision is prev_revision */
    uint64_t prev_revision;   /* 0 with check_prev_revision: only if the key does not exist */
    vl_session *session;      /* an ephemeral key, deleted when the session ends */
    uint64_t session_id;      /* the same by id, for a session this process does not hold
                                 (tools); used only when session is NULL */
    const vl_sequencer *sequencer; /* a fenced write: only while this grant is current */
} vl_put_options;

typedef struct vl_put_result {
    uint64_t revision;
    uint64_t prev_mod_revision;
    uint64_t create_revision;
    uint64_t version;
} vl_put_result;

/* Writes value_len bytes (any bytes; binary goes base64 on the wire). opts and result may be
 * NULL. VL_ERR_CAS_MISMATCH, VL_ERR_SEQUENCER_INVALID, VL_ERR_TOO_LARGE as the API says; a
 * value over 65,535 bytes, more than any cell takes, is VL_ERR_TOO_LARGE with nothing sent. */
VL_API vl_status vl_put(vl_client *c, const char *key, const void *value, size_t value_len,
                        const vl_put_options *opts, vl_put_result *result);

typedef struct vl_delete_options {
    bool prefix;              /* every key starting with key */
    bool check_prev_revision; /* one key: only if its mod_revision is prev_revision */
    uint64_t prev_revision;
    const vl_sequencer *sequencer;
} vl_delete_options;

typedef struct vl_delete_result {
    uint64_t deleted;
    uint64_t revision;
} vl_delete_result;

VL_API vl_status vl_delete(vl_client *c, const char *key, const vl_delete_options *opts,
                           vl_delete_result *result);

/* ---- Watches ------------------------------------------------------------------------------ */

typedef struct vl_watch_options {
    bool prefix;
    uint64_t start_revision; /* 0: from the next change */
    const char *spaces;      /* NULL: "kv"; or "kv,session,lock,barrier", or "all" */
} vl_watch_options;

typedef struct vl_event {
    uint64_t revision;
    char *type;  /* "put", "delete", or a session/lock/barrier event's type */
    char *key;   /* the key, lock or barrier name ("" for session events) */
    uint8_t *value; /* put: value_len bytes plus a NUL; else NULL */
    size_t value_len;
    uint64_t prev_revision;
    uint64_t session;
    char *cause;
    char *json; /* the event as the server sent it */
} vl_event;

VL_API void vl_event_free(vl_event *event);

/* Starts a watch: a background thread streams the events from one endpoint and, when that
 * stream breaks (a replica killed, a network fault, 15 s without even a heartbeat), resumes at
 * the next endpoint from the revision after the last complete one delivered: no event is
 * missed and none is delivered twice. VL_ERR_COMPACTED if start_revision is no longer kept.
 * Blocks until the first stream is open, up to command_timeout_ms. */
VL_API vl_status vl_watch_open(vl_client *c, const char *key, const vl_watch_options *opts,
                               vl_watch **out);
/* The next event, waiting up to timeout_ms for it: VL_ERR_TIMEOUT if none came. Once the watch
 * has failed for good (VL_ERR_COMPACTED: it fell behind the kept history) every call says so. */
VL_API vl_status vl_watch_next(vl_watch *w, uint32_t timeout_ms, vl_event **event_out);
/* The revision of the last event delivered (0: none yet). */
VL_API uint64_t vl_watch_last_revision(const vl_watch *w);
/* Stops the stream (within a few ms) and frees the watch. NULL is fine. */
VL_API void vl_watch_close(vl_watch *w);
VL_API const char *vl_watch_errstr(const vl_watch *w);

/* ---- Barriers ----------------------------------------------------------------------------- */

/* Enters barrier `name` of `count` members; waits up to wait_ms for all of them (0: answer
 * VL_ERR_BARRIER_NOT_READY at once if not complete). Blocks up to wait_ms + command_timeout. */
VL_API vl_status vl_barrier_enter(vl_session *s, const char *name, uint32_t count,
                                  uint32_t wait_ms);
/* Leaves it; waits up to wait_ms for every member to leave. */
VL_API vl_status vl_barrier_leave(vl_session *s, const char *name, uint32_t wait_ms);

/* ---- Information -------------------------------------------------------------------------- */

/* A read-only information document as JSON text: path is one of "/v1/cluster", "/v1/status",
 * "/v1/sessions", "/v1/sessions/ID", "/v1/locks", "/v1/locks/NAME", "/v1/barriers",
 * "/v1/barriers/NAME", "/healthz", "/readyz". endpoint_index picks the endpoint (from 0 in
 * the list given to vl_client_open), or -1 for any that answers; any other value is
 * VL_ERR_INVALID_ARGUMENT (so in vl_snapshot_save). Free with vl_string_free. */
VL_API vl_status vl_info_get(vl_client *c, const char *path, int endpoint_index, char **json_out);
/* Backs up the newest snapshot of one replica (GET /v1/internal/snapshot, docs/lockctl.md):
 * fetched chunk by chunk from endpoint_index (or, with -1, the first endpoint that answers, in
 * list order), every chunk's CRC-32C and the whole snapshot's checked, written to path +
 * ".partial", fsynced and renamed onto path. The file is what `voltlockd --export-snapshot` writes
 * and `voltlockd --import-snapshot` reads. A snapshot replaced during the fetch is fetched again
 * from the start. On an error nothing is left at path (an older file there stays). The
 * snapshot's op and size come back through op_out and size_out (either may be NULL). A replica
 * with no snapshot yet answers VL_ERR_SERVER_OTHER, the error text "no_snapshot: ..."; the text
 * of an error from the endpoint ends with its URL in parentheses. */
VL_API vl_status vl_snapshot_save(vl_client *c, int endpoint_index, const char *path,
                                  uint64_t *op_out, uint64_t *size_out);
/* How many endpoints the client was given, and the i-th (valid until vl_client_close; NULL past
 * the list). For a NULL client: 0 and NULL. */
VL_API size_t vl_client_endpoint_count(const vl_client *c);
VL_API const char *vl_client_endpoint(const vl_client *c, size_t index);

/* ---- Users, roles and tokens -------------------------------------------------------------- */

/* The replicated auth tables (docs/security-auth.md, "Users, roles and tokens through the API"),
 * for a client whose token has the admin role; others get VL_ERR_PERMISSION_DENIED and change
 * nothing. Each change goes through the log and is retried like a put. User and role names are
 * 1 to 64 bytes without control characters or '/' (the API carries them in its paths); a bad
 * argument is VL_ERR_INVALID_ARGUMENT and nothing is sent. A user, role or token that does not
 * exist: VL_ERR_NOT_FOUND. Gets and listings show the replicated tables, not the users and roles
 * of the replicas' bootstrap files; flags is a vl_read_flags. A change returns the tables'
 * revision after it (auth_revision, counted apart from the key/lock revision) through
 * auth_revision_out, which may be NULL. */

/* The permissions a grant gives, as bits. Values are never renumbered. */
typedef enum vl_permission {
    VL_PERMISSION_READ = 1,
    VL_PERMISSION_WRITE = 2,
    VL_PERMISSION_LOCK = 4,
    VL_PERMISSION_WATCH = 8,
    VL_PERMISSION_ADMIN = 16
} vl_permission;

/* The API's name of one permission ("read", "write", ...; static storage), or NULL if
 * `permission` is not exactly one of the bits. */
VL_API const char *vl_permission_name(unsigned permission);

/* One grant of a role: `permissions` (vl_permission bits, at least one) on `resource`, which is
 * "key:PREFIX", "lock:PREFIX" or "barrier:PREFIX" (every name of that kind starting with PREFIX;
 * an empty PREFIX is all of them) or "*" (everything). In a vl_role the library made, resource
 * belongs to the role. */
typedef struct vl_grant {
    unsigned permissions;
    const char *resource;
} vl_grant;

typedef struct vl_role {
    char *name;
    vl_grant *grants;
    size_t grant_count;
} vl_role;

typedef struct vl_role_list {
    vl_role *roles;
    size_t count;
    uint64_t auth_revision;
} vl_role_list;

/* Creates the role, or replaces all its grants (0 to 32). "admin" is built in (every
 * permission on everything) and can be neither put nor deleted. */
VL_API vl_status vl_role_put(vl_client *c, const char *name, const vl_grant *grants,
                             size_t grant_count, uint64_t *auth_revision_out);
/* Removes the role, and takes it from every user that has it. */
VL_API vl_status vl_role_delete(vl_client *c, const char *name, uint64_t *auth_revision_out);
VL_API vl_status vl_role_get(vl_client *c, const char *name, int flags, vl_role **out);
VL_API vl_status vl_roles_list(vl_client *c, int flags, vl_role_list **out);
VL_API void vl_role_free(vl_role *role);
VL_API void vl_role_list_free(vl_role_list *list);

typedef struct vl_user {
    char *name;
    char **roles;
    size_t role_count;
    char **token_ids; /* its tokens' ids, never the tokens */
    size_t token_count;
} vl_user;

typedef struct vl_user_list {
    vl_user *users;
    size_t count;
    uint64_t auth_revision;
} vl_user_list;

/* Creates the user, or replaces all its roles (0 to 32, each "admin" or a role that exists:
 * VL_ERR_NOT_FOUND otherwise). */
VL_API vl_status vl_user_put(vl_client *c, const char *name, const char *const *roles,
                             size_t role_count, uint64_t *auth_revision_out);
/* Removes the user and revokes its tokens (the sessions it opened keep their owner). */
VL_API vl_status vl_user_delete(vl_client *c, const char *name, uint64_t *auth_revision_out);
VL_API vl_status vl_user_get(vl_client *c, const char *name, int flags, vl_user **out);
VL_API vl_status vl_users_list(vl_client *c, int flags, vl_user_list **out);
VL_API void vl_user_free(vl_user *user);
VL_API void vl_user_list_free(vl_user_list *list);

/* A token as the tables know it: its id and owner, never the token. */
typedef struct vl_token_info {
    char *id; /* 16 lowercase hex digits: the start of the token's SHA-256 */
    char *user;
    uint64_t created_ms; /* Unix time, the leader's clock when it ordered the op */
    uint64_t expires_ms; /* 0: never */
} vl_token_info;

typedef struct vl_token_list {
    vl_token_info *tokens;
    size_t count;
    uint64_t auth_revision;
} vl_token_list;

/* A token just made. This is the only time the cell shows `token` (it keeps only its hash). */
typedef struct vl_new_token {
    char *token; /* "vl_" + 64 hex digits: the bearer token for its user */
    char *id;
    char *user;
    uint64_t ttl_s;
    uint64_t auth_revision;
} vl_new_token;

/* Makes a token for `user` (who must exist), expiring ttl_s seconds after the cell orders the op
 * (0: never; at most ten years, 316,224,000 s). */
VL_API vl_status vl_token_create(vl_client *c, const char *user, uint64_t ttl_s,
                                 vl_new_token **out);
VL_API void vl_new_token_free(vl_new_token *token);
/* Revokes a token by its id: each replica refuses it from when it has applied the revocation. */
VL_API vl_status vl_token_revoke(vl_client *c, const char *id, uint64_t *auth_revision_out);
VL_API vl_status vl_tokens_list(vl_client *c, int flags, vl_token_list **out);
VL_API void vl_token_list_free(vl_token_list *list);

#ifdef __cplusplus
}
#endif

#endif /* VOLTLOCK_H */
