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
    vl_session_interrupt(s); /* nothing in flight: the session goes on */

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

int c11_auth_walkthrough(const char *endpoints, const char *token, const char *name,
                         const char *prefix, char *why, size_t why_len)
{
    char open_error[256], role[100], user[100], keys[600], locks[600];
    const char *user_roles[1];
    vl_client_options options;
    vl_client *c = NULL;
    vl_grant grants[2];
    vl_role *got_role = NULL;
    vl_role_list *roles = NULL;
    vl_user *got_user = NULL;
    vl_user_list *users = NULL;
    vl_new_token *made = NULL;
    vl_token_list *tokens = NULL;
    uint64_t revision = 0, later = 0;
    size_t i;
    int found = 0, failed = 1;

    snprintf(role, sizeof role, "%s-role", name);
    snprintf(user, sizeof user, "%s-user", name);
    snprintf(keys, sizeof keys, "key:%s/", prefix);
    snprintf(locks, sizeof locks, "lock:%s/", prefix);
    vl_client_options_init(&options);
    options.token = token;
    if (vl_client_open(endpoints, &options, open_error, sizeof open_error, &c) != VL_OK) {
        snprintf(why, why_len, "open: %s", open_error);
        return 1;
    }
    EXPECT(strcmp(vl_permission_name(VL_PERMISSION_WATCH), "watch") == 0);
    EXPECT(vl_permission_name(VL_PERMISSION_READ | VL_PERMISSION_WRITE) == NULL);

    grants[0].permissions = VL_PERMISSION_READ | VL_PERMISSION_WATCH;
    grants[0].resource = keys;
    grants[1].permissions = VL_PERMISSION_LOCK;
    grants[1].resource = locks;
    CHECK_OK(vl_role_put(c, role, grants, 2, &revision), vl_client_errstr(c));
    CHECK_OK(vl_role_get(c, role, VL_READ_LINEARIZABLE, &got_role), vl_client_errstr(c));
    EXPECT(got_role->grant_count == 2 && strcmp(got_role->grants[1].resource, locks) == 0);
    EXPECT(got_role->grants[0].permissions == (VL_PERMISSION_READ | VL_PERMISSION_WATCH));
    CHECK_OK(vl_roles_list(c, VL_READ_STALE, &roles), vl_client_errstr(c));
    EXPECT(roles->count >= 1);

    user_roles[0] = role;
    CHECK_OK(vl_user_put(c, user, user_roles, 1, &later), vl_client_errstr(c));
    EXPECT(later > revision);
    CHECK_OK(vl_user_get(c, user, VL_READ_LINEARIZABLE, &got_user), vl_client_errstr(c));
    EXPECT(got_user->role_count == 1 && strcmp(got_user->roles[0], role) == 0);
    CHECK_OK(vl_users_list(c, VL_READ_LINEARIZABLE, &users), vl_client_errstr(c));
    EXPECT(users->auth_revision >= later);

    CHECK_OK(vl_token_create(c, user, 60, &made), vl_client_errstr(c));
    EXPECT(strncmp(made->token, "vl_", 3) == 0 && strlen(made->id) == 16 && made->ttl_s == 60);
    CHECK_OK(vl_tokens_list(c, VL_READ_LINEARIZABLE, &tokens), vl_client_errstr(c));
    for (i = 0; i < tokens->count; i++)
        if (strcmp(tokens->tokens[i].id, made->id) == 0)
            found = tokens->tokens[i].expires_ms == tokens->tokens[i].created_ms + 60000;
    EXPECT(found);
    CHECK_OK(vl_token_revoke(c, made->id, NULL), vl_client_errstr(c));
    CHECK_OK(vl_user_delete(c, user, NULL), vl_client_errstr(c));
    CHECK_OK(vl_role_delete(c, role, NULL), vl_client_errstr(c));
    failed = 0;

done:
    vl_token_list_free(tokens);
    vl_new_token_free(made);
    vl_user_list_free(users);
    vl_user_free(got_user);
    vl_role_list_free(roles);
    vl_role_free(got_role);
    vl_client_close(c);
    return failed;
}
