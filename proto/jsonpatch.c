/*
 * jsonpatch.c - RFC 6902 JSON Patch and RFC 6901 JSON Pointer over jansson.
 *
 * Invariants:
 *  1. Atomic: operations run on a deep copy; *doc is replaced only when the
 *     whole patch applied. On error the caller's document is untouched.
 *  2. Values taken from the patch are deep-copied; the patch is never
 *     modified and no reference into it is kept.
 *  3. A pointer is parsed (and its syntax checked) before the document is
 *     touched; tokens are unescaped ("~1" -> "/", then "~0" -> "~") into one
 *     heap buffer and compared with explicit lengths (NUL-safe).
 *  4. Array indexes are "0" or [1-9][0-9]*; "-" names the end and is only
 *     accepted where an element is being inserted (add, move/copy target).
 *  5. Every error names the failing operation: err->field = "/N/<member>".
 *  6. Bounded (jsonpatch.h, "Bounds"): the values copy and move take are
 *     measured before they are taken, and what add, replace and copy put in
 *     is counted against the document's size before the patch, so neither
 *     the result's size nor the work of one patch can grow past
 *     AB_JSONPATCH_MAX_SIZE (a copy of the whole document into itself
 *     doubles it: forty such operations would otherwise ask for 2^40
 *     values), and no operation places a value deeper than
 *     AB_JSONPATCH_MAX_DEPTH.
 */
#include "agentbus/jsonpatch.h"
#include "alloc_internal.h"
#include "jansson_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A parsed pointer: token i is text[start[i] .. start[i] + len[i]). */
typedef struct jp_ptr {
    char *text;
    size_t *start;
    size_t *len;
    size_t n;
} jp_ptr_t;

/* What one patch may still add and take (invariant 6). */
typedef struct jp_budget {
    size_t added; /* size of the document before, plus every value added */
    size_t taken; /* size of every value copied or moved */
} jp_budget_t;

/* Context of the operation being applied, for error fields and messages. */
typedef struct jp_op {
    size_t index;
    const char *member; /* "path" or "from": the pointer being resolved */
    ab_error_t *err;
    jp_budget_t *budget;
} jp_op_t;

static ab_status_t op_fail(const jp_op_t *op, ab_status_t code, const char *member, const char *msg)
{
    char field[48];
    snprintf(field, sizeof field, "/%zu/%s", op->index, member ? member : op->member);
    return ab_error_set(op->err, code, field, "patch operation %zu: %s", op->index, msg);
}

static void ptr_free(jp_ptr_t *p)
{
    ab__free(p->text);
    ab__free(p->start);
    ab__free(p->len);
    memset(p, 0, sizeof *p);
}

/*
 * Add the size of @p v (AB_JSONPATCH_VALUE_SIZE per value plus the bytes of
 * its strings and keys) to *size, stopping once it passes @p stop; *depth is
 * the depth of what was walked (v itself is 1).
 */
static void measure(const json_t *v, size_t stop, size_t *size, size_t *depth)
{
    size_t d = 0, cd, i;
    const char *k;
    json_t *c;
    *size += AB_JSONPATCH_VALUE_SIZE + (json_is_string(v) ? json_string_length(v) : 0);
    if (json_is_array(v)) {
        for (i = 0; i < json_array_size(v) && *size <= stop; i++) {
            measure(json_array_get(v, i), stop, size, &cd);
            d = cd > d ? cd : d;
        }
    } else if (json_is_object(v)) {
        size_t klen;
        json_object_keylen_foreach((json_t *)(uintptr_t)v, k, klen, c)
        {
            if (*size > stop)
                break;
            *size += klen;
            measure(c, stop, size, &cd);
            d = cd > d ? cd : d;
        }
    }
    *depth = d + 1;
}

/*
 * Count @p v, about to be placed @p tokens deep, against the budget:
 * @p taken for copy and move, @p adds for add, replace and copy.
 */
static ab_status_t budget_use(const jp_op_t *op, const json_t *v, size_t tokens, bool taken,
                              bool adds)
{
    jp_budget_t *b = op->budget;
    size_t used = 0, size = 0, depth = 0;
    used = taken && b->taken > used ? b->taken : used;
    used = adds && b->added > used ? b->added : used;
    if (used <= AB_JSONPATCH_MAX_SIZE) /* walk no further than the budget left */
        measure(v, AB_JSONPATCH_MAX_SIZE - used, &size, &depth);
    char msg[128];
    if (used > AB_JSONPATCH_MAX_SIZE || used + size > AB_JSONPATCH_MAX_SIZE) {
        snprintf(msg, sizeof msg, "the patch %s more than %zu MiB of values (jsonpatch.h)",
                 taken ? "copies or moves" : "makes its document hold",
                 (size_t)AB_JSONPATCH_MAX_SIZE >> 20);
        return op_fail(op, AB_TOO_LARGE, taken ? "from" : "path", msg);
    }
    if (tokens + depth > AB_JSONPATCH_MAX_DEPTH) {
        snprintf(msg, sizeof msg, "the value would be nested deeper than %d",
                 AB_JSONPATCH_MAX_DEPTH);
        return op_fail(op, AB_TOO_LARGE, "path", msg);
    }
    b->taken += taken ? size : 0;
    b->added += adds ? size : 0;
    return AB_OK;
}

/* Parse and unescape pointer [s, s+n) into @p p (RFC 6901 section 3). */
static ab_status_t ptr_parse(const char *s, size_t n, jp_ptr_t *p, const jp_op_t *op)
{
    memset(p, 0, sizeof *p);
    if (n > 0 && s[0] != '/')
        return op_fail(op, AB_INVALID_EVENT, NULL, "pointer must be empty or start with '/'");
    size_t ntok = 0;
    for (size_t i = 0; i < n; i++)
        ntok += s[i] == '/';
    p->text = ab__malloc(n + 1);
    p->start = ab__malloc((ntok ? ntok : 1) * sizeof(size_t));
    p->len = ab__malloc((ntok ? ntok : 1) * sizeof(size_t));
    if (!p->text || !p->start || !p->len) {
        ptr_free(p);
        return ab_error_set(op->err, AB_NOMEM, NULL, "out of memory");
    }
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '/') {
            if (p->n > 0)
                p->len[p->n - 1] = w - p->start[p->n - 1];
            p->start[p->n++] = w;
        } else if (s[i] == '~') {
            if (i + 1 >= n || (s[i + 1] != '0' && s[i + 1] != '1')) {
                ptr_free(p);
                return op_fail(op, AB_INVALID_EVENT, NULL, "'~' must be followed by '0' or '1'");
            }
            p->text[w++] = s[++i] == '0' ? '~' : '/';
        } else {
            p->text[w++] = s[i];
        }
    }
    if (p->n > 0)
        p->len[p->n - 1] = w - p->start[p->n - 1];
    p->text[w] = '\0';
    return AB_OK;
}

/*
 * Array index of token t (length n) in an array of @p size elements.
 * @p insert: "-" and size itself are allowed (insertion point).
 */
static ab_status_t arr_index(const char *t, size_t n, size_t size, bool insert, size_t *out,
                             const jp_op_t *op)
{
    if (n == 1 && t[0] == '-') {
        if (!insert)
            return op_fail(op, AB_NOT_FOUND, NULL, "'-' names no existing element");
        *out = size;
        return AB_OK;
    }
    if (n == 0 || n > 19 || (n > 1 && t[0] == '0'))
        return op_fail(op, AB_INVALID_EVENT, NULL,
                       "bad array index (empty, too long or leading 0)");
    size_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return op_fail(op, AB_INVALID_EVENT, NULL, "array index is not a number");
        v = v * 10 + (size_t)(t[i] - '0');
    }
    if (v > size || (v == size && !insert))
        return op_fail(op, AB_NOT_FOUND, NULL, "array index out of range");
    *out = v;
    return AB_OK;
}

/* Follow the first @p k tokens of @p p from @p root. */
static ab_status_t walk(json_t *root, const jp_ptr_t *p, size_t k, json_t **out, const jp_op_t *op)
{
    json_t *cur = root;
    for (size_t i = 0; i < k; i++) {
        const char *t = p->text + p->start[i];
        if (json_is_object(cur)) {
            cur = json_object_getn(cur, t, p->len[i]);
        } else if (json_is_array(cur)) {
            size_t idx;
            ab_status_t st = arr_index(t, p->len[i], json_array_size(cur), false, &idx, op);
            if (st != AB_OK)
                return st;
            cur = json_array_get(cur, idx);
        } else {
            cur = NULL;
        }
        if (!cur)
            return op_fail(op, AB_NOT_FOUND, NULL, "path does not exist");
    }
    *out = cur;
    return AB_OK;
}

/* Insert or set @p value (a new reference, always consumed) at @p p. */
static ab_status_t do_add(json_t **root, const jp_ptr_t *p, json_t *value, const jp_op_t *op)
{
    if (p->n == 0) {
        json_decref(*root);
        *root = value;
        return AB_OK;
    }
    json_t *parent;
    ab_status_t st = walk(*root, p, p->n - 1, &parent, op);
    const char *t = p->text + p->start[p->n - 1];
    size_t tl = p->len[p->n - 1];
    if (st == AB_OK && json_is_object(parent)) {
        if (json_object_setn_new(parent, t, tl, value) != 0)
            return ab_error_set(op->err, AB_NOMEM, NULL, "out of memory");
        return AB_OK;
    }
    if (st == AB_OK && json_is_array(parent)) {
        size_t idx;
        st = arr_index(t, tl, json_array_size(parent), true, &idx, op);
        if (st == AB_OK) {
            if (json_array_insert_new(parent, idx, value) != 0)
                return ab_error_set(op->err, AB_NOMEM, NULL, "out of memory");
            return AB_OK;
        }
    } else if (st == AB_OK) {
        st = op_fail(op, AB_NOT_FOUND, NULL, "parent is not a container");
    }
    json_decref(value);
    return st;
}

/* Remove the value at @p p; when @p taken is set, hand it over (new ref). */
static ab_status_t do_remove(json_t *root, const jp_ptr_t *p, json_t **taken, const jp_op_t *op)
{
    if (p->n == 0)
        return op_fail(op, AB_INVALID_EVENT, NULL, "cannot remove the whole document");
    json_t *parent, *target;
    ab_status_t st = walk(root, p, p->n - 1, &parent, op);
    if (st == AB_OK)
        st = walk(root, p, p->n, &target, op);
    if (st != AB_OK)
        return st;
    if (taken)
        *taken = json_incref(target);
    const char *t = p->text + p->start[p->n - 1];
    if (json_is_object(parent)) {
        json_object_deln(parent, t, p->len[p->n - 1]);
    } else {
        size_t idx;
        st = arr_index(t, p->len[p->n - 1], json_array_size(parent), false, &idx, op);
        if (st == AB_OK)
            json_array_remove(parent, idx);
    }
    return st;
}

static ab_status_t do_replace(json_t **root, const jp_ptr_t *p, json_t *value, const jp_op_t *op)
{
    if (p->n == 0)
        return do_add(root, p, value, op); /* the whole document */
    ab_status_t st = do_remove(*root, p, NULL, op);
    if (st != AB_OK) {
        json_decref(value);
        return st;
    }
    return do_add(root, p, value, op);
}

static json_t *copy_value(const json_t *v, const jp_op_t *op)
{
    json_t *c = json_deep_copy(v);
    if (!c)
        ab_error_set(op->err, AB_NOMEM, NULL, "out of memory");
    return c;
}

/* move and copy: take the value at "from" and add it at "path". */
static ab_status_t do_transfer(json_t **root, const char *from, size_t flen, const jp_ptr_t *fp,
                               const char *path, size_t plen, const jp_ptr_t *pp, bool move,
                               jp_op_t *op)
{
    op->member = "from";
    json_t *v;
    ab_status_t st = walk(*root, fp, fp->n, &v, op);
    if (st != AB_OK)
        return st;
    if (move && flen == plen && memcmp(from, path, flen) == 0)
        return AB_OK; /* moving onto itself */
    if (move && plen > flen && memcmp(from, path, flen) == 0 && path[flen] == '/')
        return op_fail(op, AB_CONFLICT, "from", "cannot move a value into its own child");
    if ((st = budget_use(op, v, pp->n, true, !move)) != AB_OK)
        return st;
    if (move) {
        st = do_remove(*root, fp, &v, op);
    } else {
        v = copy_value(v, op);
        st = v ? AB_OK : AB_NOMEM;
    }
    if (st != AB_OK)
        return st;
    op->member = "path";
    return do_add(root, pp, v, op);
}

static ab_status_t do_test(json_t *root, const jp_ptr_t *p, const json_t *value, const jp_op_t *op)
{
    json_t *cur;
    ab_status_t st = walk(root, p, p->n, &cur, op);
    if (st != AB_OK)
        return st;
    if (!ab__json_equal_value(cur, value))
        return op_fail(op, AB_CONFLICT, NULL, "test failed: value differs");
    return AB_OK;
}

/* A required string member of operation @p o, or an error naming it. */
static ab_status_t op_str(const json_t *o, const char *key, const char **s, size_t *n,
                          const jp_op_t *op)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        return op_fail(op, AB_INVALID_EVENT, key, "member missing or not a string");
    *s = json_string_value(v);
    *n = json_string_length(v);
    return AB_OK;
}

typedef enum jp_kind {
    JP_ADD,
    JP_REMOVE,
    JP_REPLACE,
    JP_MOVE,
    JP_COPY,
    JP_TEST,
    JP_UNKNOWN
} jp_kind_t;

static jp_kind_t op_kind(const char *s)
{
    static const char *const names[] = {"add", "remove", "replace", "move", "copy", "test"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0)
            return (jp_kind_t)i;
    return JP_UNKNOWN;
}

/* Check the members of operation @p o and parse its pointers. */
static ab_status_t op_prepare(const json_t *o, jp_kind_t k, jp_ptr_t *pp, jp_ptr_t *fp,
                              const json_t **value, jp_op_t *op)
{
    const char *s = NULL;
    size_t n = 0;
    ab_status_t st = op_str(o, "path", &s, &n, op);
    if (st == AB_OK)
        st = ptr_parse(s, n, pp, op);
    if (st != AB_OK)
        return st;
    if (k == JP_MOVE || k == JP_COPY) {
        op->member = "from";
        st = op_str(o, "from", &s, &n, op);
        if (st == AB_OK)
            st = ptr_parse(s, n, fp, op);
        op->member = "path";
    }
    *value = json_object_get(o, "value");
    if (st == AB_OK && (k == JP_ADD || k == JP_REPLACE || k == JP_TEST) && !*value)
        st = op_fail(op, AB_INVALID_EVENT, "value", "member 'value' is missing");
    return st;
}

/* Apply operation @p o (kind @p k) to *root. */
static ab_status_t op_apply(json_t **root, const json_t *o, jp_kind_t k, jp_op_t *op)
{
    jp_ptr_t pp = {0}, fp = {0};
    const json_t *value = NULL;
    ab_status_t st = op_prepare(o, k, &pp, &fp, &value, op);
    json_t *v = NULL;
    if (st == AB_OK && (k == JP_ADD || k == JP_REPLACE))
        st = budget_use(op, value, pp.n, false, true);
    if (st == AB_OK && (k == JP_ADD || k == JP_REPLACE)) {
        v = copy_value(value, op);
        st = v ? AB_OK : AB_NOMEM;
    }
    if (st == AB_OK) {
        const json_t *pj = json_object_get(o, "path"), *fj = json_object_get(o, "from");
        switch (k) {
        case JP_ADD: st = do_add(root, &pp, v, op); break;
        case JP_REMOVE: st = do_remove(*root, &pp, NULL, op); break;
        case JP_REPLACE: st = do_replace(root, &pp, v, op); break;
        case JP_TEST: st = do_test(*root, &pp, value, op); break;
        default:
            st = do_transfer(root, json_string_value(fj), json_string_length(fj), &fp,
                             json_string_value(pj), json_string_length(pj), &pp, k == JP_MOVE, op);
        }
    }
    ptr_free(&pp);
    ptr_free(&fp);
    return st;
}

static ab_status_t apply_all(json_t **work, const json_t *patch, ab__jsonpatch_warn_fn warn,
                             void *ud, ab_error_t *err)
{
    jp_budget_t budget = {0};
    size_t depth;
    measure(*work, AB_JSONPATCH_MAX_SIZE, &budget.added, &depth);
    for (size_t i = 0; i < json_array_size(patch); i++) {
        const json_t *o = json_array_get(patch, i);
        jp_op_t op = {i, "path", err, &budget};
        if (!json_is_object(o)) {
            char field[32];
            snprintf(field, sizeof field, "/%zu", i);
            return ab_error_set(err, AB_INVALID_EVENT, field, "operation is not an object");
        }
        const char *name = NULL;
        size_t nlen;
        ab_status_t st = op_str(o, "op", &name, &nlen, &op);
        if (st != AB_OK)
            return st;
        jp_kind_t k = op_kind(name);
        if (k == JP_UNKNOWN) {
            if (warn)
                warn(ud, i, name);
            continue;
        }
        st = op_apply(work, o, k, &op);
        if (st != AB_OK)
            return st;
    }
    return AB_OK;
}

ab_status_t ab__jsonpatch_apply_ex(json_t **doc, const json_t *patch, ab__jsonpatch_warn_fn warn,
                                   void *ud, ab_error_t *err)
{
    if (!doc || !*doc)
        return ab_error_set(err, AB_INVALID_ARGUMENT, NULL, "no document");
    if (!json_is_array(patch))
        return ab_error_set(err, AB_INVALID_EVENT, "", "a JSON Patch must be an array");
    json_t *work = json_deep_copy(*doc);
    if (!work)
        return ab_error_set(err, AB_NOMEM, NULL, "out of memory");
    ab_status_t st = apply_all(&work, patch, warn, ud, err);
    if (st != AB_OK) {
        json_decref(work);
        return st;
    }
    json_decref(*doc);
    *doc = work;
    return AB_OK;
}

ab_status_t ab__jsonpatch_apply(json_t **doc, const json_t *patch, ab_error_t *err)
{
    return ab__jsonpatch_apply_ex(doc, patch, NULL, NULL, err);
}

static bool object_equal(const json_t *a, const json_t *b)
{
    if (json_object_size(a) != json_object_size(b))
        return false;
    const char *k;
    size_t klen;
    json_t *va;
    json_object_keylen_foreach((json_t *)(uintptr_t)a, k, klen, va)
    {
        if (!ab__json_equal_value(va, json_object_getn(b, k, klen)))
            return false;
    }
    return true;
}

bool ab__json_equal_value(const json_t *a, const json_t *b)
{
    if (!a || !b)
        return a == b;
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b))
            return json_integer_value(a) == json_integer_value(b);
        return json_number_value(a) == json_number_value(b);
    }
    if (json_typeof(a) != json_typeof(b))
        return false;
    switch (json_typeof(a)) {
    case JSON_OBJECT: return object_equal(a, b);
    case JSON_ARRAY:
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!ab__json_equal_value(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) &&
               memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    default: return true; /* true, false, null: same type */
    }
}
