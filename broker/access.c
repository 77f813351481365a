/*
 * access.c - the access table: which keys a CURVE broker admits, under what
 * name, with which roles on which threads (access.h; docs/OPERATIONS.md
 * "The access file").
 *
 * The file: one principal per line, `NAME KEY ROLE...`, fields separated by
 * blanks; a line whose first non-blank character is '#' is a comment (a Z85
 * key may hold '#', so there are no comments after a field). KEY is the
 * 40-character Z85 public key or the name of a key file (NAME.key) in the
 * file's directory. ROLE is `publish`, `observe`, `serve`, `control` (each
 * alone or `*`: every thread; `ROLE:P1,P2`: threads whose id starts with P1
 * or P2) or `admin` (no prefixes).
 *
 * Invariants:
 *  1. A table is immutable once built and shared by reference count: the
 *     ZAP handler, the command thread and the writer each hold their own
 *     reference, and a reload swaps the box's pointer (ab__access_box_set),
 *     so a check in flight finishes on the table it started with.
 *  2. Keys are unique in a table, and the principals are sorted by key:
 *     lookups are a binary search over at most AB__ACCESS_MAX entries.
 *  3. Within a role no prefix extends another (the longer one is dropped at
 *     parse time): a thread matches at most one prefix, so a subscription
 *     made for each prefix delivers an event once.
 *  4. Parsing stops at the first wrong line, and its error is the one
 *     reported (NAME:LINE: what); nothing of a refused file is used.
 */
#include "access.h"
#include "agentbus/broker.h"
#include "agentbus/ids.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define FILE_MAX (4u << 20)

typedef struct grant {
    bool all;
    uint16_t n;
    const char *pfx[AB__ACCESS_PREFIXES_MAX];
    uint16_t len[AB__ACCESS_PREFIXES_MAX];
} grant_t;

struct ab__principal {
    uint8_t key[32];
    char z85[AB_KEY_Z85_SIZE];
    char name[64];
    unsigned line;
    char *arena; /* the prefixes' bytes */
    grant_t g[AB__ROLES];
};

struct ab__access {
    atomic_int refs;
    char source[AB_BROKER_PATH_MAX + 32];
    ab__principal_t *p;
    size_t n;
};

static const char *const role_names[AB__ROLES] = {"publish", "observe", "serve", "control",
                                                  "admin"};

const char *ab__role_name(ab__role_t r)
{
    return (unsigned)r < AB__ROLES ? role_names[r] : "?";
}

static ab__access_t *table_new(const char *source)
{
    ab__access_t *a = calloc(1, sizeof(*a));
    if (a != NULL) {
        atomic_init(&a->refs, 1);
        snprintf(a->source, sizeof a->source, "%s", source);
    }
    return a;
}

static ab__principal_t *table_add(ab__access_t *a)
{
    if (a->n >= AB__ACCESS_MAX)
        return NULL;
    if ((a->n & (a->n - 1)) == 0) { /* 0, 1, 2, 4 ...: double */
        size_t cap = a->n ? 2 * a->n : 8;
        ab__principal_t *v = realloc(a->p, cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        a->p = v;
    }
    ab__principal_t *p = &a->p[a->n++];
    memset(p, 0, sizeof(*p));
    return p;
}

static void table_free(ab__access_t *a)
{
    for (size_t i = 0; a && i < a->n; i++)
        free(a->p[i].arena);
    if (a)
        free(a->p);
    free(a);
}

/* ---- one line ------------------------------------------------------------ */

typedef struct line_ctx {
    const char *name; /* of the file, in messages */
    unsigned line;
    const char *dir;
    ab_error_t *err;
} line_ctx_t;

static ab_status_t line_err(const line_ctx_t *lc, const char *fmt, const char *a, size_t alen)
{
    char what[256];
    snprintf(what, sizeof what, fmt, (int)(alen > 120 ? 120 : alen), a);
    return ab_error_set(lc->err, AB_INVALID_CONFIG, "access", "%s:%u: %s", lc->name, lc->line,
                        what);
}

static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '@'))
            return false;
    }
    return true;
}

static ab_status_t read_key(ab__principal_t *p, const line_ctx_t *lc, const char *s, size_t n)
{
    char z85[AB_KEY_Z85_SIZE];
    if (n > 4 && memcmp(s + n - 4, ".key", 4) == 0) {
        if (memchr(s, '/', n) != NULL || n > 255)
            return line_err(lc, "key file '%.*s': give a file name in the access file's directory",
                            s, n);
        char path[AB_BROKER_PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%.*s", lc->dir, (int)n, s);
        ab_keypair_t kp;
        ab_error_t ke = AB_ERROR_INIT;
        if (ab_keypair_read(&kp, path, &ke) != AB_OK)
            return line_err(lc, "%.*s", ke.message, strlen(ke.message));
        memcpy(z85, kp.public_key, sizeof z85);
    } else if (n == AB_KEY_Z85_LEN) {
        memcpy(z85, s, n);
        z85[n] = '\0';
    } else {
        return line_err(
            lc, "'%.*s' is not a key: give the 40-character public key or a NAME.key file", s, n);
    }
    if (zmq_z85_decode(p->key, z85) == NULL)
        return line_err(lc, "'%.*s' is not a Z85 key", z85, AB_KEY_Z85_LEN);
    memcpy(p->z85, z85, sizeof z85);
    return AB_OK;
}

static int role_of(const char *s, size_t n)
{
    for (int r = 0; r < AB__ROLES; r++)
        if (strlen(role_names[r]) == n && memcmp(role_names[r], s, n) == 0)
            return r;
    return -1;
}

/* Add prefix s[0..n) to @p g, keeping invariant 3. */
static ab_status_t add_prefix(grant_t *g, const line_ctx_t *lc, const char *s, size_t n)
{
    ab_error_t ie = AB_ERROR_INIT;
    if (n > 0 && s[n - 1] == '*') /* a glob ('team-*', 'a**', or '*' in a list) is not a prefix */
        return line_err(lc,
                        "prefix '%.*s': a prefix is plain text (no '*'; a role alone is every "
                        "thread)",
                        s, n);
    if (ab_id_check(s, n, 0, "prefix", &ie) != AB_OK)
        return line_err(lc,
                        "prefix '%.*s' is not a thread id prefix (an id: 1..256 bytes of "
                        "UTF-8, no control character, no ',')",
                        s, n);
    for (uint16_t i = 0; i < g->n; i++)
        if (g->len[i] <= n && memcmp(g->pfx[i], s, g->len[i]) == 0)
            return AB_OK; /* already covered by a shorter one */
    uint16_t k = 0;
    for (uint16_t i = 0; i < g->n; i++) { /* drop the ones the new one covers */
        if (g->len[i] > n && memcmp(g->pfx[i], s, n) == 0)
            continue;
        g->pfx[k] = g->pfx[i];
        g->len[k++] = g->len[i];
    }
    g->n = k;
    if (g->n >= AB__ACCESS_PREFIXES_MAX)
        return line_err(lc, "more than 32 prefixes for one role%.*s", "", 0);
    g->pfx[g->n] = s;
    g->len[g->n++] = (uint16_t)n;
    return AB_OK;
}

/* One ROLE or ROLE:P1,P2 field; its prefixes point into @p s (the arena). */
static ab_status_t parse_role(ab__principal_t *p, const line_ctx_t *lc, char *s, size_t n)
{
    char *colon = memchr(s, ':', n);
    size_t rn = colon ? (size_t)(colon - s) : n;
    int r = role_of(s, rn);
    if (r < 0)
        return line_err(lc, "unknown role '%.*s' (publish, observe, serve, control, admin)", s, rn);
    grant_t *g = &p->g[r];
    if (colon == NULL || (n - rn == 2 && colon[1] == '*')) {
        g->all = true;
        g->n = 0;
        return AB_OK;
    }
    if (r == AB__ROLE_ADMIN)
        return line_err(lc, "admin covers every thread: it takes no prefixes ('%.*s')", s, n);
    char *q = colon + 1, *end = s + n;
    for (;;) {
        char *comma = memchr(q, ',', (size_t)(end - q));
        char *stop = comma ? comma : end;
        if (stop == q)
            return line_err(lc, "an empty prefix in '%.*s'", s, n);
        ab_status_t rc = g->all ? AB_OK : add_prefix(g, lc, q, (size_t)(stop - q));
        if (rc != AB_OK)
            return rc;
        if (comma == NULL)
            return AB_OK;
        q = comma + 1;
    }
}

/* Split @p s (NUL-terminated, modified: fields are NUL-terminated) at blanks. */
static size_t fields(char *s, char **f, size_t *fl, size_t max)
{
    size_t n = 0;
    while (*s != '\0') {
        while (*s == ' ' || *s == '\t' || *s == '\r')
            s++;
        if (*s == '\0')
            break;
        char *b = s;
        while (*s != '\0' && *s != ' ' && *s != '\t' && *s != '\r')
            s++;
        if (n < max) {
            f[n] = b;
            fl[n] = (size_t)(s - b);
        }
        n++;
        if (*s != '\0')
            *s++ = '\0';
    }
    return n;
}

static ab_status_t parse_line(ab__access_t *a, const line_ctx_t *lc, const char *s, size_t n)
{
    if (memchr(s, '\0', n) != NULL)
        return line_err(lc, "a NUL byte%.*s", "", 0);
    if (n > AB__ACCESS_LINE_MAX)
        return line_err(lc, "a line longer than 4096 bytes%.*s", "", 0);
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'))
        i++;
    if (i == n || s[i] == '#')
        return AB_OK;
    ab__principal_t *p = table_add(a);
    char *copy = malloc(n + 1);
    if (p == NULL || copy == NULL) {
        free(copy);
        if (p == NULL)
            return line_err(lc, "more than 4096 keys%.*s", "", 0);
        return ab_error_set(lc->err, AB_NOMEM, "", "out of memory reading %s", lc->name);
    }
    memcpy(copy, s, n);
    copy[n] = '\0';
    p->arena = copy;
    p->line = lc->line;
    char *f[3 + AB__ROLES * 2];
    size_t fl[3 + AB__ROLES * 2];
    size_t nf = fields(copy, f, fl, sizeof f / sizeof f[0]);
    if (nf < 3)
        return line_err(lc, "'%.*s': a line is NAME KEY ROLE..., with at least one role", s + i,
                        n - i);
    if (nf > sizeof f / sizeof f[0])
        return line_err(lc,
                        "too many fields (a role may be given once, with its prefixes "
                        "separated by commas)%.*s",
                        "", 0);
    if (!name_ok(f[0], fl[0]))
        return line_err(lc, "name '%.*s': 1..63 of A-Z a-z 0-9 . _ - @", f[0], fl[0]);
    snprintf(p->name, sizeof p->name, "%s", f[0]);
    ab_status_t rc = read_key(p, lc, f[1], fl[1]);
    for (size_t k = 2; rc == AB_OK && k < nf; k++)
        rc = parse_role(p, lc, f[k], fl[k]);
    return rc;
}

/* ---- whole tables --------------------------------------------------------- */

static int by_key(const void *x, const void *y)
{
    return memcmp(((const ab__principal_t *)x)->key, ((const ab__principal_t *)y)->key, 32);
}

/* Sort by key and refuse a key given twice (invariant 2). */
static ab_status_t finish(ab__access_t *a, const char *name, ab_error_t *err)
{
    if (a->n > 1)
        qsort(a->p, a->n, sizeof(*a->p), by_key);
    for (size_t i = 1; i < a->n; i++) {
        if (memcmp(a->p[i - 1].key, a->p[i].key, 32) != 0)
            continue;
        const ab__principal_t *x = &a->p[i - 1], *y = &a->p[i];
        if (x->line > y->line) {
            const ab__principal_t *t = x;
            x = y;
            y = t;
        }
        if (y->line == 0) /* a directory of key files */
            return ab_error_set(err, AB_INVALID_CONFIG, "access",
                                "%s: %s.key and %s.key hold the same key", name, x->name, y->name);
        return ab_error_set(err, AB_INVALID_CONFIG, "access",
                            "%s:%u: the key of %s is already given on line %u", name, y->line,
                            y->name, x->line);
    }
    return AB_OK;
}

ab_status_t ab__access_parse(ab__access_t **out, const char *name, const char *text, size_t len,
                             const char *dir, ab_error_t *err)
{
    ab__access_t *a = table_new(name);
    if (a == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory");
    line_ctx_t lc = {.name = name, .dir = dir, .err = err};
    ab_status_t rc = AB_OK;
    for (size_t at = 0; rc == AB_OK && at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        lc.line++;
        rc = parse_line(a, &lc, text + at, n);
        at += n + 1;
    }
    if (rc == AB_OK)
        rc = finish(a, name, err);
    if (rc != AB_OK) {
        table_free(a);
        return rc;
    }
    *out = a;
    return AB_OK;
}

static ab_status_t read_file(const char *path, char **text, size_t *len, ab_error_t *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return ab_error_set(err, errno == ENOENT ? AB_NOT_FOUND : AB_INVALID_CONFIG, "access",
                            "cannot read %s: %s", path, strerror(errno));
    char *buf = malloc(FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, FILE_MAX + 1, f) : 0;
    bool bad = ferror(f) != 0;
    fclose(f);
    if (buf == NULL)
        return ab_error_set(err, AB_NOMEM, "", "out of memory reading %s", path);
    if (bad || n > FILE_MAX) {
        free(buf);
        return ab_error_set(err, AB_INVALID_CONFIG, "access", "%s: %s", path,
                            bad ? "read error" : "larger than 4 MiB");
    }
    *text = buf;
    *len = n;
    return AB_OK;
}

static ab_status_t load_file(ab__access_t **out, const char *path, ab_error_t *err)
{
    char *text = NULL;
    size_t len = 0;
    ab_status_t rc = read_file(path, &text, &len, err);
    if (rc != AB_OK)
        return rc;
    char dir[AB_BROKER_PATH_MAX];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (slash == path)
        snprintf(dir, sizeof dir, "/");
    rc = ab__access_parse(out, path, text, len, dir, err);
    free(text);
    return rc;
}

static bool is_client_key(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && strcmp(name + n - 4, ".key") == 0 && strcmp(name, "broker.key") != 0 &&
           name[0] != '.';
}

/* Every DIR/NAME.key but broker.key, each admin. */
static ab_status_t load_dir(ab__access_t **out, const char *dir, ab_error_t *err)
{
    char source[AB_BROKER_PATH_MAX + 32];
    snprintf(source, sizeof source, "%s (every key: admin)", dir);
    DIR *d = opendir(dir);
    ab__access_t *a = d ? table_new(source) : NULL;
    if (d == NULL)
        return ab_error_set(err, AB_INVALID_CONFIG, "keys", "cannot read %s: %s", dir,
                            strerror(errno));
    ab_status_t rc = a ? AB_OK : ab_error_set(err, AB_NOMEM, "", "out of memory");
    for (struct dirent *e; rc == AB_OK && (e = readdir(d)) != NULL;) {
        if (!is_client_key(e->d_name))
            continue;
        ab__principal_t *p = table_add(a);
        if (p == NULL) {
            rc = ab_error_set(err, AB_TOO_LARGE, "keys", "%s: more than %d client keys", dir,
                              AB__ACCESS_MAX);
            break;
        }
        snprintf(p->name, sizeof p->name, "%.*s", (int)(strlen(e->d_name) - 4), e->d_name);
        p->g[AB__ROLE_ADMIN].all = true;
        char path[AB_BROKER_PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ab_keypair_t kp;
        rc = ab_keypair_read(&kp, path, err);
        if (rc == AB_OK && zmq_z85_decode(p->key, kp.public_key) == NULL)
            rc = ab_error_set(err, AB_INVALID_CONFIG, "keys", "%s: not a Z85 key", path);
        if (rc == AB_OK)
            memcpy(p->z85, kp.public_key, sizeof p->z85);
    }
    closedir(d);
    if (rc == AB_OK)
        rc = finish(a, dir, err);
    if (rc != AB_OK) {
        table_free(a);
        return rc;
    }
    *out = a;
    return AB_OK;
}

ab_status_t ab__access_load(ab__access_t **out, const char *dir, const char *file, ab_error_t *err)
{
    if (file != NULL && file[0] != '\0')
        return load_file(out, file, err);
    char path[AB_BROKER_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/access", dir);
    ab_status_t rc = load_file(out, path, err);
    if (rc != AB_NOT_FOUND)
        return rc;
    ab_error_clear(err);
    return load_dir(out, dir, err);
}

const char *ab__access_source(const ab__access_t *a)
{
    return a->source;
}

size_t ab__access_count(const ab__access_t *a)
{
    return a->n;
}

const ab__principal_t *ab__access_at(const ab__access_t *a, size_t i)
{
    return &a->p[i];
}

ab__access_t *ab__access_ref(ab__access_t *a)
{
    if (a != NULL)
        atomic_fetch_add(&a->refs, 1);
    return a;
}

void ab__access_unref(ab__access_t **ap)
{
    ab__access_t *a = ap ? *ap : NULL;
    if (a == NULL)
        return;
    *ap = NULL;
    if (atomic_fetch_sub(&a->refs, 1) == 1)
        table_free(a);
}

/* ---- questions ------------------------------------------------------------ */

const ab__principal_t *ab__access_find(const ab__access_t *a, const uint8_t *key)
{
    size_t lo = 0, hi = a ? a->n : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(a->p[mid].key, key, 32);
        if (c == 0)
            return &a->p[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const ab__principal_t *ab__access_find_z85(const ab__access_t *a, const char *z85, size_t len)
{
    char s[AB_KEY_Z85_SIZE];
    uint8_t key[32];
    if (len != AB_KEY_Z85_LEN)
        return NULL;
    memcpy(s, z85, len);
    s[len] = '\0';
    return zmq_z85_decode(key, s) ? ab__access_find(a, key) : NULL;
}

const char *ab__principal_name(const ab__principal_t *p)
{
    return p->name;
}

const char *ab__principal_key(const ab__principal_t *p)
{
    return p->z85;
}

bool ab__access_may_all(const ab__principal_t *p, ab__role_t role)
{
    return p != NULL && (p->g[AB__ROLE_ADMIN].all || p->g[role].all);
}

bool ab__access_has(const ab__principal_t *p, ab__role_t role)
{
    return p != NULL && (ab__access_may_all(p, role) || p->g[role].n > 0);
}

bool ab__access_may(const ab__principal_t *p, ab__role_t role, const char *thread, size_t len)
{
    if (p == NULL)
        return false;
    if (ab__access_may_all(p, role))
        return true;
    const grant_t *g = &p->g[role];
    for (uint16_t i = 0; i < g->n; i++)
        if (g->len[i] <= len && memcmp(g->pfx[i], thread, g->len[i]) == 0)
            return true;
    return false;
}

void ab__access_grant(const ab__principal_t *p, ab__role_t role, bool *all, const char *const **pfx,
                      const uint16_t **lens, size_t *n)
{
    *all = ab__access_may_all(p, role);
    *pfx = p->g[role].pfx;
    *lens = p->g[role].len;
    *n = *all ? 0 : p->g[role].n;
}

/* The subscription for allowed topic A (@p al bytes) of a requested @p t: A
 * when t is a prefix of it, t when A is a prefix of t, else none. */
static size_t meet(const uint8_t *a, size_t al, const uint8_t *t, size_t tl,
                   void (*fn)(void *, const uint8_t *, size_t), void *ud)
{
    size_t m = al < tl ? al : tl;
    if (memcmp(a, t, m) != 0)
        return 0;
    if (tl <= al)
        fn(ud, a, al);
    else
        fn(ud, t, tl);
    return 1;
}

size_t ab__access_topics(const ab__principal_t *p, const uint8_t *t, size_t tl,
                         void (*fn)(void *ud, const uint8_t *topic, size_t len), void *ud)
{
    if (p == NULL)
        return 0;
    if (ab__access_may_all(p, AB__ROLE_OBSERVE)) {
        fn(ud, t, tl);
        return 1;
    }
    size_t n = meet((const uint8_t *)"hb", 2, t, tl, fn, ud);
    const grant_t *g = &p->g[AB__ROLE_OBSERVE];
    uint8_t topic[3 + AB_ID_MAX_BYTES];
    memcpy(topic, "ev", 3); /* with its NUL */
    for (uint16_t i = 0; i < g->n; i++) {
        memcpy(topic + 3, g->pfx[i], g->len[i]);
        n += meet(topic, 3 + (size_t)g->len[i], t, tl, fn, ud);
    }
    return n;
}

/* Whether every thread @p old observes, @p now observes too. */
static bool covers(const ab__principal_t *now, const ab__principal_t *old)
{
    if (ab__access_may_all(now, AB__ROLE_OBSERVE))
        return true;
    if (ab__access_may_all(old, AB__ROLE_OBSERVE))
        return false;
    const grant_t *g = &old->g[AB__ROLE_OBSERVE];
    for (uint16_t i = 0; i < g->n; i++)
        if (!ab__access_may(now, AB__ROLE_OBSERVE, g->pfx[i], g->len[i]))
            return false;
    return true;
}

bool ab__access_narrowed(const ab__access_t *old, const ab__access_t *now)
{
    for (size_t i = 0; old != NULL && i < old->n; i++) {
        const ab__principal_t *o = &old->p[i];
        if (!ab__access_has(o, AB__ROLE_OBSERVE))
            continue;
        const ab__principal_t *n = ab__access_find(now, o->key);
        if (n == NULL || !covers(n, o))
            return true;
    }
    return false;
}

/* ---- the box -------------------------------------------------------------- */

void ab__access_box_init(ab__access_box_t *box)
{
    pthread_mutex_init(&box->mu, NULL);
    box->cur = NULL;
}

void ab__access_box_free(ab__access_box_t *box)
{
    ab__access_unref(&box->cur);
    pthread_mutex_destroy(&box->mu);
}

ab__access_t *ab__access_box_get(ab__access_box_t *box)
{
    pthread_mutex_lock(&box->mu);
    ab__access_t *a = ab__access_ref(box->cur);
    pthread_mutex_unlock(&box->mu);
    return a;
}

void ab__access_box_set(ab__access_box_t *box, ab__access_t *a)
{
    pthread_mutex_lock(&box->mu);
    ab__access_t *old = box->cur;
    box->cur = a;
    pthread_mutex_unlock(&box->mu);
    ab__access_unref(&old);
}
