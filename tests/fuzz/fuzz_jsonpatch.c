/*
 * fuzz_jsonpatch.c - libFuzzer target for RFC 6902 JSON Patch
 * (ab__jsonpatch_apply_ex, proto/jsonpatch.c): the patch and the document
 * are both fuzzed.
 *
 * Input: one JSON text (jansson, U+0000 allowed in strings), an array
 *   [document, patch]          or
 *   [document, patch, n]       n >= 1: the n-th allocation made while the
 *                              patch is applied fails (the hooks of
 *                              agentbus/alloc.h, which jansson uses too).
 * Anything else is ignored. The patch may be any JSON value.
 *
 * Checks, for any input; a violation calls abort():
 *  1. the answer is AB_OK, AB_INVALID_EVENT, AB_NOT_FOUND, AB_CONFLICT,
 *     AB_TOO_LARGE or AB_NOMEM, and AB_NOMEM only when an allocation failed;
 *     an allocation that failed is never answered AB_OK;
 *  2. every error carries its code, a message, and a field that is "" (the
 *     patch is not an array, or a whole-patch bound), "/N" or
 *     "/N/<op|path|from|value>" with N an index of the patch;
 *  3. atomicity: on any error the document is the same pointer with the
 *     same content; the patch is never changed;
 *  4. on AB_OK: applying the patch to a second copy of the document gives
 *     an equal result; the result shares no array or object with the patch
 *     (values are deep-copied); the warning callback was called once per
 *     operation with an unknown "op", with its index and name, in order;
 *  5. on AB_OK, the last operation did what RFC 6902 says, checked with a
 *     pointer resolver of this file against the document the operations
 *     before it produce: add/replace/copy/move leave the expected value at
 *     "path" (unless the path ends in "-"), remove takes the member away or
 *     shortens the array by one, test changes nothing;
 *  6. ab__json_equal_value() is reflexive and symmetric on the values read;
 *  7. without an injected failure, the public text form
 *     (ab_jsonpatch_apply_json) gives the same answer, error field and
 *     result as the jansson form.
 * ASan/UBSan watch the rest.
 */
#include "agentbus/alloc.h"
#include "agentbus/jsonpatch.h"
#include "jansson_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- allocation failure injection ---- */

static unsigned long g_count, g_fail_at, g_failed;

static void *fail_malloc(size_t n)
{
    if (g_fail_at != 0 && ++g_count == g_fail_at) {
        g_failed++;
        return NULL;
    }
    return malloc(n);
}

static void *fail_realloc(void *p, size_t n)
{
    if (g_fail_at != 0 && ++g_count == g_fail_at) {
        g_failed++;
        return NULL;
    }
    return realloc(p, n);
}

static void arm(unsigned long n)
{
    g_count = 0;
    g_failed = 0;
    g_fail_at = n;
}

/* ---- an independent RFC 6901 resolver ---- */

/* Unescape token s[0..n) into a malloc'd buffer (*len bytes); NULL on bad syntax. */
static char *token(const char *s, size_t n, size_t *len)
{
    char *t = malloc(n + 1);
    size_t w = 0;
    for (size_t i = 0; t && i < n; i++) {
        if (s[i] != '~') {
            t[w++] = s[i];
        } else if (i + 1 < n && (s[i + 1] == '0' || s[i + 1] == '1')) {
            t[w++] = s[++i] == '0' ? '~' : '/';
        } else {
            free(t);
            return NULL;
        }
    }
    *len = w;
    return t;
}

/* Array index of token t (no leading zeros, digits only); false for anything else. */
static bool index_of(const char *t, size_t n, size_t *out)
{
    if (n == 0 || n > 18 || (n > 1 && t[0] == '0'))
        return false;
    size_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return false;
        v = v * 10 + (size_t)(t[i] - '0');
    }
    *out = v;
    return true;
}

/* One step from @p cur by token s[0..n) (escaped), or NULL. */
static json_t *step(json_t *cur, const char *s, size_t n)
{
    size_t len, idx;
    char *t = token(s, n, &len);
    json_t *next = NULL;
    if (t && json_is_object(cur))
        next = json_object_getn(cur, t, len);
    else if (t && json_is_array(cur) && index_of(t, len, &idx))
        next = json_array_get(cur, idx);
    free(t);
    return next;
}

/* The value at pointer s[0..n) in @p root, or NULL. */
static json_t *resolve(json_t *root, const char *s, size_t n)
{
    if (n == 0)
        return root;
    if (s[0] != '/')
        return NULL;
    json_t *cur = root;
    size_t at = 1;
    while (cur != NULL) {
        const char *slash = memchr(s + at, '/', n - at);
        size_t end = slash ? (size_t)(slash - s) : n;
        cur = step(cur, s + at, end - at);
        if (!slash)
            break;
        at = end + 1;
    }
    return cur;
}

/* Length of the parent part of pointer s[0..n) (up to its last '/'). */
static size_t parent_len(const char *s, size_t n)
{
    while (n > 0 && s[n - 1] != '/')
        n--;
    return n > 0 ? n - 1 : 0;
}

/* ---- checks ---- */

typedef struct warns {
    const json_t *patch;
    size_t n;
    size_t last;
} warns_t;

static bool known_op(const char *s)
{
    static const char *const names[] = {"add", "remove", "replace", "move", "copy", "test"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0)
            return true;
    return false;
}

static void on_warn(void *ud, size_t index, const char *op)
{
    warns_t *w = ud;
    const char *want = json_string_value(json_object_get(json_array_get(w->patch, index), "op"));
    if (index >= json_array_size(w->patch) || !want || strcmp(want, op) != 0 || known_op(op))
        abort();
    if (w->n > 0 && index <= w->last)
        abort(); /* in order, once each */
    w->n++;
    w->last = index;
}

/* Invariant 2: the error's code, message and field. */
static void check_error(ab_status_t rc, const ab_error_t *err, const json_t *patch)
{
    if (err->code != rc || err->message[0] == '\0')
        abort();
    const char *f = err->field;
    if (f[0] == '\0')
        return;
    char *end = NULL;
    if (f[0] != '/' || f[1] < '0' || f[1] > '9')
        abort();
    unsigned long long i = strtoull(f + 1, &end, 10);
    if (!json_is_array(patch) || i >= json_array_size(patch))
        abort();
    if (*end == '\0')
        return;
    if (strcmp(end, "/op") != 0 && strcmp(end, "/path") != 0 && strcmp(end, "/from") != 0 &&
        strcmp(end, "/value") != 0)
        abort();
}

/* Invariant 4: the arrays and objects of the patch, sorted, to look results up in. */
typedef struct ptrs {
    const json_t **p;
    size_t n, cap;
} ptrs_t;

static void collect(ptrs_t *s, const json_t *v)
{
    if (!json_is_array(v) && !json_is_object(v))
        return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->p = realloc(s->p, s->cap * sizeof *s->p);
        if (s->p == NULL)
            abort();
    }
    s->p[s->n++] = v;
    size_t i;
    const char *k;
    json_t *c;
    if (json_is_array(v)) {
        json_array_foreach(v, i, c) collect(s, c);
    } else {
        json_object_foreach((json_t *)(uintptr_t)v, k, c) collect(s, c);
    }
}

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const json_t *const *)a,
              y = (uintptr_t) * (const json_t *const *)b;
    return x < y ? -1 : x > y;
}

/* Whether @p v or anything in it is one of the patch's containers. */
static bool shares(const json_t *v, const ptrs_t *s)
{
    if (!json_is_array(v) && !json_is_object(v))
        return false;
    if (bsearch(&v, s->p, s->n, sizeof *s->p, ptr_cmp) != NULL)
        return true;
    size_t i;
    const char *k;
    json_t *c;
    if (json_is_array(v)) {
        json_array_foreach(v, i, c) if (shares(c, s)) return true;
    } else {
        json_object_foreach((json_t *)(uintptr_t)v, k, c) if (shares(c, s)) return true;
    }
    return false;
}

static bool shares_any(const json_t *result, const json_t *patch)
{
    ptrs_t s = {0};
    collect(&s, patch);
    if (s.n > 0)
        qsort(s.p, s.n, sizeof *s.p, ptr_cmp);
    bool found = s.n > 0 && shares(result, &s);
    free(s.p);
    return found;
}

static size_t count_unknown(const json_t *patch)
{
    size_t n = 0, i;
    json_t *o;
    json_array_foreach(patch, i, o) n += !known_op(json_string_value(json_object_get(o, "op")));
    return n;
}

/* Apply @p patch to a deep copy of @p doc without failure injection; NULL if it fails. */
static json_t *apply_copy(const json_t *doc, const json_t *patch)
{
    json_t *d = json_deep_copy(doc);
    ab_error_t err = AB_ERROR_INIT;
    if (d == NULL || ab__jsonpatch_apply(&d, patch, &err) != AB_OK) {
        json_decref(d);
        return NULL;
    }
    return d;
}

/* Invariant 5 for a remove of path s[0..n) from @p pre, giving @p result. */
static void check_remove(json_t *pre, json_t *result, const char *s, size_t n)
{
    size_t pl = parent_len(s, n), tl;
    json_t *pp = resolve(pre, s, pl), *rp = resolve(result, s, pl);
    char *t = token(s + pl + 1, n - pl - 1, &tl);
    if (!pp || !rp || !t)
        abort();
    if (json_is_object(rp) && json_object_getn(rp, t, tl) != NULL)
        abort();
    if (json_is_array(rp) && json_array_size(rp) + 1 != json_array_size(pp))
        abort();
    free(t);
}

/* Invariant 5: what the last operation of a successful patch did. */
static void check_last(const json_t *doc, const json_t *patch, json_t *result)
{
    size_t n = json_array_size(patch);
    const json_t *o = json_array_get(patch, n - 1);
    const char *op = json_string_value(json_object_get(o, "op"));
    const json_t *pj = json_object_get(o, "path"), *fj = json_object_get(o, "from");
    if (!known_op(op))
        return;
    json_t *head = json_array(), *pre = NULL;
    for (size_t i = 0; head && i + 1 < n; i++)
        json_array_append(head, json_array_get(patch, i));
    if (head == NULL || (pre = apply_copy(doc, head)) == NULL)
        abort(); /* a prefix of a patch that applied applies */
    const char *ps = json_string_value(pj);
    size_t pn = json_string_length(pj);
    const json_t *want = NULL;
    if (strcmp(op, "add") == 0 || strcmp(op, "replace") == 0)
        want = json_object_get(o, "value");
    else if (strcmp(op, "copy") == 0 || strcmp(op, "move") == 0)
        want = resolve(pre, json_string_value(fj), json_string_length(fj));
    if (strcmp(op, "test") == 0 && !json_equal(pre, result))
        abort();
    if (strcmp(op, "remove") == 0)
        check_remove(pre, result, ps, pn);
    bool append = pn >= 2 && ps[pn - 1] == '-' && ps[pn - 2] == '/';
    if (want != NULL && !append) {
        const json_t *got = resolve(result, ps, pn);
        if (!got || !json_equal(got, want))
            abort();
    }
    json_decref(pre);
    json_decref(head);
}

static void check_success(const json_t *orig, const json_t *patch, json_t *doc, const warns_t *w)
{
    json_t *again = apply_copy(orig, patch);
    if (again == NULL || !json_equal(again, doc))
        abort();
    json_decref(again);
    if (shares_any(doc, patch))
        abort();
    if (w->n != count_unknown(patch))
        abort();
    if (json_array_size(patch) > 0)
        check_last(orig, patch, doc);
}

static void check_equal_value(const json_t *a, const json_t *b)
{
    if (!ab__json_equal_value(a, a) || ab__json_equal_value(a, b) != ab__json_equal_value(b, a))
        abort();
}

static size_t depth_of(const json_t *v)
{
    size_t d = 0, i;
    const char *k;
    json_t *c;
    if (json_is_array(v)) {
        json_array_foreach(v, i, c) d = d > depth_of(c) ? d : depth_of(c);
    } else if (json_is_object(v)) {
        json_object_foreach((json_t *)(uintptr_t)v, k, c) d = d > depth_of(c) ? d : depth_of(c);
    }
    return d + 1;
}

/*
 * Invariant 7: the public text form (ab_jsonpatch_apply_json) answers what
 * the jansson form answered, for documents and patches its reader takes
 * (nesting well below its limit of 512).
 */
static void check_text(const json_t *orig, const json_t *patch, ab_status_t rc,
                       const json_t *result, const ab_error_t *err)
{
    if (depth_of(orig) > 256 || depth_of(patch) > 256)
        return;
    char *d = json_dumps(orig, JSON_COMPACT | JSON_ENCODE_ANY);
    char *p = json_dumps(patch, JSON_COMPACT | JSON_ENCODE_ANY);
    ab_buf_t out = AB_BUF_INIT;
    ab_error_t e = AB_ERROR_INIT;
    if (d == NULL || p == NULL)
        abort();
    ab_status_t st = ab_jsonpatch_apply_json(d, strlen(d), p, strlen(p), &out, &e);
    if (st != rc || (rc != AB_OK && strcmp(e.field, err->field) != 0))
        abort();
    if (rc == AB_OK) {
        json_t *back =
            json_loadb((const char *)out.data, out.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (back == NULL || !json_equal(back, result))
            abort();
        json_decref(back);
    }
    ab_buf_free(&out);
    free(d);
    free(p);
}

static void run(json_t *doc, const json_t *patch, unsigned long fail_at)
{
    json_t *orig = json_deep_copy(doc), *porig = json_deep_copy(patch), *before = doc;
    if (!orig || !porig)
        abort();
    warns_t w = {.patch = patch};
    ab_error_t err = AB_ERROR_INIT;
    arm(fail_at);
    ab_status_t rc = ab__jsonpatch_apply_ex(&doc, patch, on_warn, &w, &err);
    unsigned long failed = g_failed;
    arm(0);
    if (rc != AB_OK && rc != AB_INVALID_EVENT && rc != AB_NOT_FOUND && rc != AB_CONFLICT &&
        rc != AB_TOO_LARGE && rc != AB_NOMEM)
        abort();
    if ((rc == AB_NOMEM) != (failed > 0))
        abort(); /* invariant 1 */
    if (!json_equal(patch, porig))
        abort();
    if (rc != AB_OK) {
        check_error(rc, &err, patch);
        if (doc != before || !json_equal(doc, orig))
            abort();
    } else {
        check_success(orig, patch, doc, &w);
    }
    check_equal_value(orig, patch);
    if (fail_at == 0)
        check_text(orig, patch, rc, doc, &err);
    json_decref(doc);
    json_decref(orig);
    json_decref(porig);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool init;
    if (!init) {
        ab_set_allocator(fail_malloc, fail_realloc, free);
        init = true;
    }
    json_error_t je;
    json_t *in = json_loadb((const char *)data, size, JSON_ALLOW_NUL, &je);
    size_t n = json_array_size(in);
    const json_t *nth = json_array_get(in, 2);
    if (n == 2 || (n == 3 && json_is_integer(nth) && json_integer_value(nth) >= 1)) {
        unsigned long fail_at = n == 3 ? (unsigned long)json_integer_value(nth) : 0;
        run(json_incref(json_array_get(in, 0)), json_array_get(in, 1), fail_at);
    }
    json_decref(in);
    return 0;
}
