/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tu_ctx_init(tu_ctx_t *c)
{
    memset(c, 0, sizeof(*c));
    assert_int_equal(ab_doc_new(&c->doc), AB_OK);
}

void tu_ctx_free(tu_ctx_t *c)
{
    ab_doc_destroy(&c->doc);
    ab_buf_free(&c->buf);
}

const ab_val_t *tu_json(tu_ctx_t *c, const char *json)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_reset(&c->buf);
    if (ab_json_to_msgpack(json, strlen(json), 64, 1u << 20, AB_INVALID_EVENT, &c->buf, &err) !=
        AB_OK)
        fail_msg("bad test JSON: %s: %s", err.message, json);
    const ab_val_t *root = NULL;
    if (ab_doc_parse(c->doc, c->buf.data, c->buf.len, 1u << 20, 64, AB_INVALID_EVENT, &root,
                     &err) != AB_OK)
        fail_msg("reparse failed: %s", err.message);
    return root;
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    assert_non_null(p);
    if (fread(p, 1, (size_t)n, f) != (size_t)n)
        fail_msg("short read on %s", path);
    fclose(f);
    p[n] = '\0';
    if (len)
        *len = (size_t)n;
    return p;
}

uint32_t tu_val_depth(const ab_val_t *v)
{
    uint32_t d = 0;
    for (uint32_t i = 0; i < v->len && (v->type == AB_VAL_ARRAY || v->type == AB_VAL_MAP); i++) {
        uint32_t c = tu_val_depth(v->type == AB_VAL_ARRAY ? &v->u.items[i] : &v->u.pairs[i].val);
        d = c > d ? c : d;
    }
    return d + 1;
}
