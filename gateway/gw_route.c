/*
 * gw_route.c - decoding what an HTTP client hands the gateway: the request
 * path into a route and its ids, an event cursor, and the token file.
 *
 * Invariants:
 *  1. No function reads past the length it is given, allocates without a
 *     bound, or writes an out-param unless it succeeds.
 *  2. Every refusal is typed (AB_INVALID_ARGUMENT for a request,
 *     AB_INVALID_CONFIG for the token file) and names what is wrong: the
 *     path segment ("path/thread"), the cursor's source, or "line N".
 *  3. An id decoded from the path passes ab_id_check() (the broker's own
 *     rule), so a bad id is refused here before anything is sent.
 * Fuzzed by tests/fuzz/fuzz_gateway.c.
 */
#include "gateway.h"

#include "agentbus/ids.h"
#include "agentbus/json.h"
#include "agentbus/value.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t ab__gw_key_run_max(const char *tag)
{
    int fixed = snprintf(NULL, 0, AB_GW_KEY_FMT, tag, 0ull, "");
    return fixed > 0 && fixed < AB_ID_MAX_BYTES ? (size_t)(AB_ID_MAX_BYTES - fixed) : 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decode [s, s+len) into out (at most max bytes, NUL-terminated: out holds max + 1). */
static ab_status_t unescape(const char *s, size_t len, char *out, size_t max, size_t *olen,
                            const char *field, ab_error_t *err)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '%') {
            int hi = i + 2 < len + 0 ? hexval(s[i + 1]) : -1;
            int lo = hi >= 0 ? hexval(s[i + 2]) : -1;
            if (lo < 0)
                return ab_error_set(err, AB_INVALID_ARGUMENT, field,
                                    "bad percent escape at byte %zu (want %%XX, X a hex digit)", i);
            c = (char)(hi * 16 + lo);
            i += 2;
        }
        if (n == max) {
            ab_error_set(err, AB_INVALID_ARGUMENT, field, "longer than %zu bytes", max);
            ab_error_detail_int(err, "limit", (int64_t)max);
            return AB_INVALID_ARGUMENT;
        }
        out[n++] = c;
    }
    out[n] = '\0';
    *olen = n;
    return AB_OK;
}

/* Decode segment @p seg into the id buffer @p id (AB_GW_TOKEN_MAX + 1 bytes) and check it as an
 * id of at most @p max bytes. */
static ab_status_t seg_id(const char *seg, size_t len, char *id, size_t max, const char *field,
                          ab_error_t *err)
{
    size_t n = 0;
    ab_status_t rc = unescape(seg, len, id, max, &n, field, err);
    if (rc == AB_OK && memchr(id, '\0', n) != NULL)
        rc = ab_error_set(err, AB_INVALID_ARGUMENT, field, "holds a NUL byte");
    if (rc == AB_OK && ab_id_check(id, n, (uint32_t)max, field, err) != AB_OK) {
        err->code = AB_INVALID_ARGUMENT;
        rc = AB_INVALID_ARGUMENT;
    }
    return rc;
}

typedef struct segs {
    const char *p[AB_GW_PATH_SEGMENTS_MAX];
    size_t len[AB_GW_PATH_SEGMENTS_MAX];
    size_t n;
} segs_t;

/* Split "/a/b/c" into segments; false when there are too many or one is empty. */
static bool split(const char *path, size_t len, segs_t *s)
{
    s->n = 0;
    if (len == 0 || path[0] != '/')
        return false;
    if (len == 1)
        return true;
    size_t i = 1;
    while (i <= len) {
        size_t j = i;
        while (j < len && path[j] != '/')
            j++;
        if (j == i || s->n == AB_GW_PATH_SEGMENTS_MAX)
            return false;
        s->p[s->n] = path + i;
        s->len[s->n++] = j - i;
        i = j + 1;
    }
    return true;
}

static bool is(const segs_t *s, size_t i, const char *lit)
{
    return i < s->n && s->len[i] == strlen(lit) && memcmp(s->p[i], lit, s->len[i]) == 0;
}

/* /threads/{t}/... : the kinds under a thread. */
static ab_status_t thread_route(const segs_t *s, ab__gw_route_t *r, ab_error_t *err)
{
    if (s->n < 3)
        return AB_OK;
    ab__gw_route_kind_t k = AB_GW_R_NONE;
    if (s->n == 3)
        k = is(s, 2, "events")     ? AB_GW_R_THREAD_EVENTS
            : is(s, 2, "snapshot") ? AB_GW_R_SNAPSHOT
            : is(s, 2, "runs")     ? AB_GW_R_RUNS
                                   : AB_GW_R_NONE;
    else if (s->n == 5 && is(s, 2, "runs"))
        k = is(s, 4, "events")   ? AB_GW_R_RUN_EVENTS
            : is(s, 4, "cancel") ? AB_GW_R_CANCEL
            : is(s, 4, "resume") ? AB_GW_R_RESUME
                                 : AB_GW_R_NONE;
    if (k == AB_GW_R_NONE)
        return AB_OK;
    /* the run of a resume makes its idempotency key, which bounds it (gateway.h) */
    size_t run_max =
        k == AB_GW_R_RESUME ? ab__gw_key_run_max(AB_GW_KEY_TAG_RESUME) : AB_GW_TOKEN_MAX;
    ab_status_t rc = seg_id(s->p[1], s->len[1], r->thread, AB_GW_TOKEN_MAX, "path/thread", err);
    if (rc == AB_OK && s->n == 5)
        rc = seg_id(s->p[3], s->len[3], r->run, run_max, "path/run", err);
    if (rc == AB_OK) {
        r->kind = k;
        r->method = k == AB_GW_R_CANCEL || k == AB_GW_R_RESUME ? "POST" : "GET";
    }
    return rc;
}

/* /agents/{a} and /agents/{a}/actions/{action}. */
static ab_status_t agent_route(const segs_t *s, ab__gw_route_t *r, ab_error_t *err)
{
    if (s->n != 2 && !(s->n == 4 && is(s, 2, "actions")))
        return AB_OK;
    ab_status_t rc = seg_id(s->p[1], s->len[1], r->agent, AB_GW_TOKEN_MAX, "path/agent", err);
    if (rc == AB_OK && s->n == 4)
        rc = seg_id(s->p[3], s->len[3], r->action, AB_GW_TOKEN_MAX, "path/action", err);
    if (rc == AB_OK) {
        r->kind = s->n == 2 ? AB_GW_R_AGENT_RUN : AB_GW_R_ACTION;
        r->method = "POST";
    }
    return rc;
}

ab_status_t ab__gw_route_parse(const char *path, size_t len, ab__gw_route_t *out, ab_error_t *err)
{
    segs_t s;
    ab__gw_route_t r;
    memset(&r, 0, sizeof r);
    r.method = "GET";
    ab_status_t rc = AB_OK;
    if (!split(path, len, &s))
        r.kind = AB_GW_R_NONE;
    else if (s.n == 0 || (s.n == 1 && is(&s, 0, "index.html")))
        r.kind = AB_GW_R_PAGE;
    else if (s.n == 1 && is(&s, 0, "healthz"))
        r.kind = AB_GW_R_HEALTH;
    else if (s.n == 1 && is(&s, 0, "metrics"))
        r.kind = AB_GW_R_METRICS;
    else if (s.n == 1 && is(&s, 0, "workers"))
        r.kind = AB_GW_R_WORKERS;
    else if (s.n == 1 && is(&s, 0, "threads"))
        r.kind = AB_GW_R_THREADS;
    else if (is(&s, 0, "threads"))
        rc = thread_route(&s, &r, err);
    else if (is(&s, 0, "agents"))
        rc = agent_route(&s, &r, err);
    if (rc == AB_OK)
        *out = r;
    return rc;
}

ab_status_t ab__gw_cursor_parse(const char *s, size_t len, const char *field, uint64_t *out,
                                ab_error_t *err)
{
    if (len == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, field,
                            "empty cursor (want the decimal id of an event, 0 = from the start)");
    if (len > 20)
        return ab_error_set(err, AB_INVALID_ARGUMENT, field,
                            "cursor of %zu characters (want a decimal of at most 20 digits)", len);
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return ab_error_set(err, AB_INVALID_ARGUMENT, field,
                                "cursor has a non-digit at character %zu (want a decimal event id)",
                                i);
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return ab_error_set(err, AB_INVALID_ARGUMENT, field,
                                "cursor above 18446744073709551615");
        v = v * 10 + d;
    }
    if (len > 1 && s[0] == '0')
        return ab_error_set(err, AB_INVALID_ARGUMENT, field, "cursor with a leading zero");
    *out = v;
    return AB_OK;
}

ab_status_t ab__gw_query_cursor(const char *s, size_t len, const char *field, uint64_t *out,
                                ab_error_t *err)
{
    char dec[64]; /* a cursor is at most 20 digits: a longer one is refused by its length */
    size_t n = 0;
    ab_status_t rc = unescape(s, len, dec, sizeof dec - 1, &n, field, err);
    if (rc != AB_OK)
        return rc;
    return ab__gw_cursor_parse(dec, n, field, out, err);
}

/* ---- the query of GET /threads ------------------------------------------------ */

ab_status_t ab__gw_query_id(const char *s, size_t n, const char *field, char *dst, ab_error_t *err)
{
    dst[0] = '\0';
    if (s == NULL || n == 0)
        return AB_OK;
    size_t len = 0;
    ab_status_t rc = unescape(s, n, dst, AB_GW_TOKEN_MAX, &len, field, err);
    if (rc != AB_OK)
        return rc;
    if (len == 0)
        return AB_OK;
    if (memchr(dst, '\0', len) != NULL ||
        ab_id_check(dst, len, AB_GW_TOKEN_MAX, field, err) != AB_OK) {
        dst[0] = '\0';
        ab_error_clear(err);
        return ab_error_set(err, AB_INVALID_ARGUMENT, field,
                            "%s must be empty or a thread id (1..%d bytes of UTF-8, no control "
                            "characters)",
                            field, AB_GW_TOKEN_MAX);
    }
    return AB_OK;
}

ab_status_t ab__gw_threads_query(const char *after, size_t alen, const char *prefix, size_t plen,
                                 const char *limit, size_t llen, ab__gw_threads_q_t *out,
                                 ab_error_t *err)
{
    memset(out, 0, sizeof *out);
    ab_status_t rc = ab__gw_query_id(after, alen, "after", out->after, err);
    if (rc == AB_OK)
        rc = ab__gw_query_id(prefix, plen, "prefix", out->prefix, err);
    if (rc != AB_OK || limit == NULL)
        return rc;
    char dec[64]; /* percent-decoded as the ids are; over 9 digits is refused below */
    rc = unescape(limit, llen, dec, sizeof dec - 1, &llen, "limit", err);
    if (rc != AB_OK)
        return rc;
    limit = dec;
    uint32_t v = 0;
    bool ok = llen > 0 && llen <= 9; /* 9 digits never overflow v */
    for (size_t i = 0; ok && i < llen; i++) {
        ok = limit[i] >= '0' && limit[i] <= '9';
        v = v * 10 + (uint32_t)(limit[i] - '0');
    }
    if (!ok || v < 1 || v > AB_GW_THREADS_LIMIT_MAX)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "limit",
                            "limit must be a number of threads from 1 to %d",
                            AB_GW_THREADS_LIMIT_MAX);
    out->limit = v;
    return AB_OK;
}

/* ---- text of an answer ------------------------------------------------------ */

/* The length of the whole UTF-8 sequence at @p s (at most @p n bytes), 0 when none starts there. */
static size_t utf8_seq(const char *s, size_t n)
{
    unsigned char c = (unsigned char)s[0];
    size_t k = c < 0x80                 ? 1
               : c >= 0xc2 && c <= 0xdf ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    return k > 0 && k <= n && ab_utf8_valid(s, k) ? k : 0;
}

ab_status_t ab__gw_json_text(ab_buf_t *out, const char *s, size_t len)
{
    ab_buf_t t = AB_BUF_INIT;
    ab_status_t rc = AB_OK;
    for (size_t i = 0; i < len && rc == AB_OK;) {
        size_t k = utf8_seq(s + i, len - i);
        rc = k ? ab_buf_append(&t, s + i, k) : ab_buf_append(&t, "\xef\xbf\xbd", 3);
        i += k ? k : 1;
    }
    if (rc == AB_OK)
        rc = ab_json_quote(out, t.len ? (const char *)t.data : "", t.len);
    ab_buf_free(&t);
    return rc;
}

/* ---- token file ----------------------------------------------------------- */

static bool token_char(char c)
{
    return c > ' ' && c < 0x7f;
}

/* One non-comment line [p, p+len): "TOKEN IDENTITY". */
static ab_status_t token_line(const char *p, size_t len, size_t line, ab__gw_token_t *t,
                              ab_error_t *err)
{
    size_t i = 0;
    while (i < len && token_char(p[i]))
        i++;
    if (i < 16 || i > AB_GW_TOKEN_MAX)
        return ab_error_set(err, AB_INVALID_CONFIG, "tokens",
                            "line %zu: a token of %zu bytes (want 16..%d printable ASCII)", line, i,
                            AB_GW_TOKEN_MAX);
    size_t tl = i;
    while (i < len && (p[i] == ' ' || p[i] == '\t'))
        i++;
    size_t st = i;
    while (i < len && token_char(p[i]))
        i++;
    size_t il = i - st;
    while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r'))
        i++;
    if (st == tl || il == 0 || i != len)
        return ab_error_set(err, AB_INVALID_CONFIG, "tokens",
                            "line %zu: want \"TOKEN IDENTITY\" (two words of printable ASCII)",
                            line);
    if (il > 64 || ab_id_check(p + st, il, 64, "identity", err) != AB_OK)
        return ab_error_set(err, AB_INVALID_CONFIG, "tokens",
                            "line %zu: the identity is not a name of at most 64 bytes", line);
    memcpy(t->token, p, tl);
    t->token[tl] = '\0';
    memcpy(t->identity, p + st, il);
    t->identity[il] = '\0';
    return AB_OK;
}

static ab_status_t token_add(ab__gw_token_t **v, size_t *n, const ab__gw_token_t *t, size_t line,
                             ab_error_t *err)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*v)[i].token, t->token) == 0)
            return ab_error_set(err, AB_INVALID_CONFIG, "tokens",
                                "line %zu: the same token as another line", line);
    if (*n == AB_GW_TOKENS_MAX)
        return ab_error_set(err, AB_TOO_LARGE, "tokens", "more than %d tokens", AB_GW_TOKENS_MAX);
    ab__gw_token_t *g = realloc(*v, (*n + 1) * sizeof(**v));
    if (g == NULL)
        return ab_error_set(err, AB_NOMEM, "tokens", "out of memory");
    g[(*n)++] = *t;
    *v = g;
    return AB_OK;
}

ab_status_t ab__gw_tokens_parse(const char *text, size_t len, ab__gw_token_t **out, size_t *n,
                                ab_error_t *err)
{
    ab__gw_token_t *v = NULL, t;
    size_t count = 0, line = 0;
    ab_status_t rc = AB_OK;
    for (size_t i = 0; i < len && rc == AB_OK;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len, ll = end - i;
        line++;
        while (ll > 0 && (text[i + ll - 1] == '\r' || text[i + ll - 1] == ' '))
            ll--;
        if (ll > 0 && text[i] != '#') {
            rc = token_line(text + i, ll, line, &t, err);
            if (rc == AB_OK)
                rc = token_add(&v, &count, &t, line, err);
        }
        i = end + 1;
    }
    if (rc != AB_OK) {
        free(v);
        return rc;
    }
    *out = v;
    *n = count;
    return AB_OK;
}
