/* Compiled with -std=c11 -Wall -Wextra -Werror -pedantic: voltlock.h is C, and usable from C. */
#include "c11_calls.h"

#include <stdio.h>
#include <string.h>

#include <voltlock.h>

#define CHECK_OK(call, errstr)                                                                 \
    do {                                                                                       \
        vl_status check_status_ = (call);                                                      \
        if (check_status_ != VL_OK) {                                                          \
            snprintf(why, why_len, "line %d: %s: %s (%s)", __LINE__, #call,                    \
                     vl_status_name(check_status_), (errstr));                                 \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

#define EXPECT(condition)                                                                      \
    do {                                                                                       \
        if (!(condition)) {                                                                    \
            snprintf(why, why_len, "line %d: expected %s", __LINE__, #condition);              \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

int c11_walkthrough(const char *endpoints, const char *prefix, char *why, size_t why_len)
{
    char open_error[256];
    char lock[600], key[600], barrier[600];
    vl_client *c = NULL;
    vl_session *s = NULL;
    vl_sequencer *seq = NULL, *parsed = NULL;
    char *seq_text = NULL;
    vl_kv *kv = NULL;
    vl_kv_list *list = NULL;
    vl_watch *w = NULL;
    vl_event *event = NULL;
    vl_put_options put;
    vl_put_result written;
    vl_delete_options del;
    vl_delete_result deleted;
    vl_watch_options watch;
    vl_session_options session_options;
    bool valid = false;
    int failed = 1;
    const unsigned char binary[4] = {0, 255, 10, 0};

    snprintf(lock, sizeof lock, "%s/lock", prefix);
    snprintf(key, sizeof key, "%s/kv/a", prefix);
    snprintf(barrier, sizeof barrier, "%s/barrier", prefix);
    if (vl_client_open(endpoints, NULL, open_error, sizeof open_error, &c) != VL_OK) {
        snprintf(why, why_len, "open: %s", open_error);
        return 1;
    }
    vl_session_options_init(&session_options);
    session_options.name = "c11";
    CHECK_OK(vl_session_open(c, 10000, &session_options, &s), vl_client_errstr(c));
    EXPECT(vl_session_id(s) > 0);
    EXPECT(vl_session_status(s) == VL_OK);

    CHECK_OK(vl_lock_acquire(s, lock, VL_LOCK_EXCLUSIVE, 1000, &seq), vl_session_errstr(s));
    EXPECT(seq->generation > 0 && seq->session == vl_session_id(s));
    CHECK_OK(vl_sequencer_format(seq, &seq_text), "format");
    CHECK_OK(vl_sequencer_parse(seq_text, &parsed), "parse");
    EXPECT(parsed->generation == seq->generation && strcmp(parsed->lock, lock) == 0);
    CHECK_OK(vl_sequencer_check(c, parsed, &valid), vl_client_errstr(c));
    EXPECT(valid);

    memset(&watch, 0, sizeof watch);
    watch.prefix = true;
    snprintf(key, sizeof key, "%s/kv/", prefix);
    CHECK_OK(vl_watch_open(c, key, &watch, &w), vl_client_errstr(c));
    snprintf(key, sizeof key, "%s/kv/a", prefix);

    memset(&put, 0, sizeof put);
    put.sequencer = seq;
    CHECK_OK(vl_put(c, key, binary, sizeof binary, &put, &written), vl_client_errstr(c));
    EXPECT(written.revision > 0 && written.version == 1);
    CHECK_OK(vl_get(c, key, VL_READ_LINEARIZABLE, &kv), vl_client_errstr(c));
    EXPECT(kv->value_len == sizeof binary && memcmp(kv->value, binary, sizeof binary) == 0);
    EXPECT(kv->mod_revision == written.revision);

    CHECK_OK(vl_watch_next(w, 10000, &event), vl_watch_errstr(w));
    EXPECT(event->revision == written.revision && strcmp(event->type, "put") == 0);
    EXPECT(event->value_len == sizeof binary);

    snprintf(key, sizeof key, "%s/kv/", prefix);
    CHECK_OK(vl_get_prefix(c, key, NULL, 0, VL_READ_LINEARIZABLE, &list), vl_client_errstr(c));
    EXPECT(list->count == 1 && !list->more);

    memset(&del, 0, sizeof del);
    del.prefix = true;
    CHECK_OK(vl_delete(c, key, &del, &deleted), vl_client_errstr(c));
    EXPECT(deleted.deleted == 1);

    CHECK_OK(vl_barrier_enter(s, barrier, 1, 1000), vl_session_errstr(s));
    CHECK_OK(vl_barrier_leave(s, barrier, 1000), vl_session_errstr(s));
    CHECK_OK(vl_lock_release(s, lock), vl_session_errstr(s));
    CHECK_OK(vl_sequencer_check(c, seq, &valid), vl_client_errstr(c));
    EXPECT(!valid);
    failed = 0;

done:
    vl_event_free(event);
    vl_watch_close(w);
    vl_kv_list_free(list);
    vl_kv_free(kv);
    vl_string_free(seq_text);
    vl_sequencer_free(parsed);
    vl_sequencer_free(seq);
    if (vl_session_close(s) != VL_OK && !failed) {
        snprintf(why, why_len, "session close: %s", vl_client_errstr(c));
        failed = 1;
    }
    vl_client_close(c);
    return failed;
}
