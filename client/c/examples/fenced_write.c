/* Takes a lock and writes a key fenced by the lock's sequencer: the write applies only while
 * this grant of the lock is the current one.
 *
 *   cc -std=c11 fenced_write.c $(pkg-config --cflags --libs voltlock) -o fenced_write
 *   VOLTLOCK_ENDPOINTS=http://10.77.0.10:7480,http://10.77.0.11:7480 \
 *       ./fenced_write db/primary config/db 10.0.0.5
 */
#include <stdio.h>
#include <string.h>

#include <voltlock.h>

int main(int argc, char **argv)
{
    char open_error[256];
    vl_client *client = NULL;
    vl_session *session = NULL;
    vl_sequencer *seq = NULL;
    char *seq_text = NULL;
    vl_put_options put;
    vl_put_result written;
    vl_status status;
    int exit_code = 1;

    if (argc != 4) {
        fprintf(stderr, "usage: %s LOCK KEY VALUE (endpoints in VOLTLOCK_ENDPOINTS)\n", argv[0]);
        return 2;
    }
    /* NULL: the endpoints in $VOLTLOCK_ENDPOINTS, else http://127.0.0.1:7480. */
    status = vl_client_open(NULL, NULL, open_error, sizeof open_error, &client);
    if (status != VL_OK) {
        fprintf(stderr, "open: %s\n", open_error);
        return 2;
    }
    status = vl_session_open(client, 10000, NULL, &session);
    if (status != VL_OK) {
        fprintf(stderr, "session: %s\n", vl_client_errstr(client));
        goto done;
    }
    status = vl_lock_acquire(session, argv[1], VL_LOCK_EXCLUSIVE, 30000, &seq);
    if (status != VL_OK) {
        fprintf(stderr, "lock: %s\n", vl_session_errstr(session));
        goto done;
    }
    if (vl_sequencer_format(seq, &seq_text) == VL_OK) printf("holding %s\n", seq_text);

    memset(&put, 0, sizeof put);
    put.sequencer = seq;
    status = vl_put(client, argv[2], argv[3], strlen(argv[3]), &put, &written);
    if (status != VL_OK) {
        fprintf(stderr, "put: %s\n", vl_client_errstr(client));
        goto done;
    }
    printf("wrote %s at revision %llu\n", argv[2], (unsigned long long)written.revision);
    status = vl_lock_release(session, argv[1]);
    exit_code = status == VL_OK ? 0 : 1;

done:
    vl_string_free(seq_text);
    vl_sequencer_free(seq);
    if (vl_session_close(session) != VL_OK) exit_code = 1;
    vl_client_close(client);
    return exit_code;
}
