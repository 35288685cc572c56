/* The clib tests' plain C11 part: every call of voltlock.h made from C (c11_calls.c). */
#ifndef CLIB_C11_CALLS_H
#define CLIB_C11_CALLS_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
/* Walks through the API under names starting with prefix; 0 on success, else the failing
 * step's line and text in why. */
int c11_walkthrough(const char *endpoints, const char *prefix, char *why, size_t why_len);
/* The users, roles and tokens calls, as the admin (token) of a cell with auth on; user and role
 * names start with name (no '/'), key and lock grants with prefix. */
int c11_auth_walkthrough(const char *endpoints, const char *token, const char *name,
                         const char *prefix, char *why, size_t why_len);
#ifdef __cplusplus
}
#endif
#endif
