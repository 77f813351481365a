/*
 * fuzz_gateway.c - libFuzzer target for what the HTTP gateway decodes from
 * its clients and its operator (gateway/gw_route.c): the request path into a
 * route with percent-decoded ids, the event cursor (Last-Event-ID, ?after=)
 * and the token file.
 *
 * Input: the first byte picks the decoder (0xFF: the query of GET /threads,
 * its three values `after`, `prefix`, `limit` split by the first two '\n'
 * of the rest, a missing one absent; 0xFE: the text of an error answer;
 * 0xFD: a ?after= cursor, percent-encoded; else by its value mod 3 - 0: path,
 * 1: cursor, 2: token file); the rest is its input, any bytes.
 *
 * Checks, for any input; a violation calls abort():
 *  1. path: AB_OK or AB_INVALID_ARGUMENT whose field starts with "path/";
 *     on AB_OK a route's ids are non-empty, NUL-free, at most 256 bytes, and
 *     pass ab_id_check(); a path that does not start with '/' is no route;
 *  2. cursor: AB_OK exactly when the input is "0" or 1..20 digits without a
 *     leading zero whose value fits 64 bits, and then the value prints back
 *     as the same digits; a refusal names the field it was given;
 *  3. token file: AB_OK or AB_INVALID_CONFIG / AB_TOO_LARGE with field
 *     "tokens"; on AB_OK every token is 16..256 printable bytes, tokens are
 *     distinct, and each token is found in the input;
 *  4. threads query: AB_OK or AB_INVALID_ARGUMENT naming after, prefix or
 *     limit; on AB_OK `after` and `prefix` are "" or ids, `limit` is 0 (no
 *     limit given) or 1..1000 and then given as its digits (unless escaped);
 *  5. error text (ab__gw_json_text, what an answer quotes of a request's raw
 *     bytes): one JSON string of valid UTF-8 that the bus's strict parser
 *     reads back, exactly the input when the input was valid UTF-8;
 *  6. ?after= cursor: AB_OK or AB_INVALID_ARGUMENT naming "after"; without a
 *     '%' exactly what the header's parse gives (check 2).
 * ASan/UBSan watch the rest.
 */
#include "gateway.h"

#include "agentbus/ids.h"
#include "agentbus/json.h"
#include "agentbus/value.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_id(const char *id)
{
    size_t n = strlen(id);
    ab_error_t e = AB_ERROR_INIT;
    if (n == 0 || n > AB_GW_TOKEN_MAX || ab_id_check(id, n, 0, "id", &e) != AB_OK)
        abort();
}

static void fuzz_path(const char *p, size_t n)
{
    ab__gw_route_t r;
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t rc = ab__gw_route_parse(p, n, &r, &e);
    if (rc != AB_OK) {
        if (rc != AB_INVALID_ARGUMENT || strncmp(e.field, "path/", 5) != 0)
            abort();
        return;
    }
    if ((n == 0 || p[0] != '/') && r.kind != AB_GW_R_NONE)
        abort();
    if (r.thread[0])
        check_id(r.thread);
    if (r.run[0])
        check_id(r.run);
    if (r.agent[0])
        check_id(r.agent);
    if (r.action[0])
        check_id(r.action);
    if ((r.kind == AB_GW_R_THREAD_EVENTS || r.kind == AB_GW_R_SNAPSHOT) && !r.thread[0])
        abort();
}

static void fuzz_cursor(const char *p, size_t n)
{
    uint64_t v = 0;
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t rc = ab__gw_cursor_parse(p, n, "after", &v, &e);
    bool digits = n > 0 && n <= 20 && (n == 1 || p[0] != '0');
    for (size_t i = 0; i < n && digits; i++)
        digits = p[i] >= '0' && p[i] <= '9';
    if (rc == AB_OK) {
        char back[32];
        int k = snprintf(back, sizeof back, "%" PRIu64, v);
        if (!digits || (size_t)k != n || memcmp(back, p, n) != 0)
            abort();
    } else if (rc != AB_INVALID_ARGUMENT || strcmp(e.field, "after") != 0 || (digits && n < 20)) {
        abort();
    }
}

/* A ?after= cursor: with no '%' it is read exactly as the header's; any accepted one prints
 * back as the decimal of its value, and a refusal names the parameter. */
static void fuzz_query_cursor(const char *p, size_t n)
{
    uint64_t v = 0, w = 0;
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t rc = ab__gw_query_cursor(p, n, "after", &v, &e);
    if (rc != AB_OK && (rc != AB_INVALID_ARGUMENT || strcmp(e.field, "after") != 0))
        abort();
    if (memchr(p, '%', n) == NULL) {
        ab_error_t e2 = AB_ERROR_INIT;
        if (ab__gw_cursor_parse(p, n, "after", &w, &e2) != rc || (rc == AB_OK && v != w))
            abort();
    }
}

static bool found_in(const char *hay, size_t n, const char *needle, size_t l)
{
    for (size_t i = 0; i + l <= n; i++)
        if (memcmp(hay + i, needle, l) == 0)
            return true;
    return false;
}

static void fuzz_tokens(const char *p, size_t n)
{
    ab__gw_token_t *t = NULL;
    size_t nt = 0;
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t rc = ab__gw_tokens_parse(p, n, &t, &nt, &e);
    if (rc != AB_OK) {
        if ((rc != AB_INVALID_CONFIG && rc != AB_TOO_LARGE && rc != AB_NOMEM) ||
            strcmp(e.field, "tokens") != 0 || t != NULL)
            abort();
        return;
    }
    for (size_t i = 0; i < nt; i++) {
        size_t l = strlen(t[i].token);
        if (l < 16 || l > AB_GW_TOKEN_MAX)
            abort();
        for (size_t j = 0; j < l; j++)
            if (t[i].token[j] <= ' ' || t[i].token[j] >= 0x7f)
                abort();
        for (size_t j = 0; j < i; j++)
            if (strcmp(t[i].token, t[j].token) == 0)
                abort();
        if (!found_in(p, n, t[i].token, l))
            abort();
        check_id(t[i].identity);
    }
    free(t);
}

static void fuzz_threads_query(const char *p, size_t n)
{
    const char *v[3] = {NULL, NULL, NULL};
    size_t len[3] = {0, 0, 0};
    const char *at = p, *end = p + n;
    for (int i = 0; i < 3 && at <= end; i++) {
        const char *nl = i < 2 ? memchr(at, '\n', (size_t)(end - at)) : NULL;
        v[i] = at;
        len[i] = (size_t)((nl ? nl : end) - at);
        if (!nl)
            break;
        at = nl + 1;
    }
    ab__gw_threads_q_t q;
    ab_error_t e = AB_ERROR_INIT;
    ab_status_t rc = ab__gw_threads_query(v[0], len[0], v[1], len[1], v[2], len[2], &q, &e);
    if (rc != AB_OK) {
        if (rc != AB_INVALID_ARGUMENT ||
            (strcmp(e.field, "after") != 0 && strcmp(e.field, "prefix") != 0 &&
             strcmp(e.field, "limit") != 0))
            abort();
        return;
    }
    if (q.after[0])
        check_id(q.after);
    if (q.prefix[0])
        check_id(q.prefix);
    if ((v[2] == NULL) != (q.limit == 0) || q.limit > 1000)
        abort();
    if (v[2] != NULL && memchr(v[2], '%', len[2]) == NULL) { /* escaped: decoded first */
        char back[8];
        int k = snprintf(back, sizeof back, "%u", q.limit);
        if ((size_t)k > len[2] || memcmp(back, v[2] + len[2] - (size_t)k, (size_t)k) != 0)
            abort();
    }
}

static void fuzz_text(const char *p, size_t n)
{
    ab_buf_t out = AB_BUF_INIT, mp = AB_BUF_INIT;
    ab_doc_t *doc = NULL;
    const ab_val_t *v = NULL;
    ab_error_t e = AB_ERROR_INIT;
    if (ab__gw_json_text(&out, p, n) != AB_OK || ab_doc_new(&doc) != AB_OK)
        goto cleanup; /* out of memory */
    const char *j = (const char *)out.data;
    if (out.len < 2 || j[0] != '"' || j[out.len - 1] != '"' || !ab_utf8_valid(j, out.len))
        abort();
    uint32_t max = (uint32_t)out.len + 16;
    if (ab_json_to_msgpack(j, out.len, 4, max, AB_INVALID_ARGUMENT, &mp, &e) != AB_OK ||
        ab_doc_parse(doc, mp.data, mp.len, max, 4, AB_INVALID_ARGUMENT, &v, &e) != AB_OK ||
        v->type != AB_VAL_STR)
        abort();
    if (ab_utf8_valid(p, n) && (v->len != n || memcmp(v->u.s, p, n) != 0))
        abort();
cleanup:
    ab_doc_destroy(&doc);
    ab_buf_free(&mp);
    ab_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char *p = malloc(size); /* exactly the input: ASan sees any read past it */
    if (p == NULL)
        return 0;
    memcpy(p, data + 1, size - 1);
    if (data[0] >= 0xFD) {
        if (data[0] == 0xFF)
            fuzz_threads_query(p, size - 1);
        else if (data[0] == 0xFE)
            fuzz_text(p, size - 1);
        else
            fuzz_query_cursor(p, size - 1);
        free(p);
        return 0;
    }
    switch (data[0] % 3) {
    case 0: fuzz_path(p, size - 1); break;
    case 1: fuzz_cursor(p, size - 1); break;
    default: fuzz_tokens(p, size - 1); break;
    }
    free(p);
    return 0;
}
