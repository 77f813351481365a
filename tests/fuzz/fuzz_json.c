/*
 * fuzz_json.c - libFuzzer target for the JSON bridge.
 *
 * Checks, for any input text:
 *  1. ab_json_to_msgpack never crashes, and whatever it produces the strict
 *     reader accepts (the bridge never emits a non-JSON-safe value);
 *  2. msgpack -> JSON -> msgpack is lossless (the trees are equal);
 *  3. the parser agrees with jansson, which the bridge used before: a text
 *     jansson accepts gives the bytes jansson + msgpack-c give, and a text
 *     jansson refuses is refused, except where the parser is wider on
 *     purpose - an integer beyond int64 (jansson: "too big integer"), a NUL
 *     in an object key (jansson: not supported) - and where jansson is
 *     wrong: it drops a NUL byte that directly follows a number or a
 *     literal ("[1\0]" and "[true\0]" read as [1] and [true]: its lexer puts
 *     the NUL back and then takes it for the end of its buffer), which RFC
 *     8259 does not allow. A depth or size limit of ours (AB_TOO_LARGE) is
 *     not compared.
 */
#include "agentbus/json.h"

#include <jansson.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The old bridge: a jansson tree packed with msgpack-c. */
static int pack_jansson(msgpack_packer *pk, json_t *j)
{
    int rc = 0;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        rc = msgpack_pack_map(pk, json_object_size(j));
        for (void *it = json_object_iter(j); rc == 0 && it; it = json_object_iter_next(j, it)) {
            rc = msgpack_pack_str_with_body(pk, json_object_iter_key(it),
                                            json_object_iter_key_len(it));
            if (rc == 0)
                rc = pack_jansson(pk, json_object_iter_value(it));
        }
        return rc;
    }
    case JSON_ARRAY:
        rc = msgpack_pack_array(pk, json_array_size(j));
        for (size_t i = 0; rc == 0 && i < json_array_size(j); i++)
            rc = pack_jansson(pk, json_array_get(j, i));
        return rc;
    case JSON_STRING:
        return msgpack_pack_str_with_body(pk, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return msgpack_pack_int64(pk, (int64_t)json_integer_value(j));
    case JSON_REAL: return msgpack_pack_double(pk, json_real_value(j));
    case JSON_TRUE: return msgpack_pack_true(pk);
    case JSON_FALSE: return msgpack_pack_false(pk);
    case JSON_NULL: return msgpack_pack_nil(pk);
    }
    return -1;
}

/* Invariant 3 for a text whose own result is @p rc (output @p mp). */
static void compare_with_jansson(const uint8_t *data, size_t size, ab_status_t rc,
                                 const ab_buf_t *mp, const ab_error_t *err)
{
    if (rc == AB_TOO_LARGE || rc == AB_NOMEM)
        return;
    json_error_t je;
    json_t *j = json_loadb((const char *)data, size,
                           JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j) {
        bool wider = strstr(je.text, "too big") || strstr(je.text, "NUL byte in object key") ||
                     strstr(je.text, "maximum parsing depth");
        if (rc == AB_OK && !wider)
            abort(); /* we accept what jansson refuses, for no reason of ours */
        return;
    }
    if (rc != AB_OK && !strstr(err->message, "found byte 0x00"))
        abort(); /* we refuse what jansson accepts */
    if (rc != AB_OK) {
        json_decref(j);
        return;
    }
    ab_buf_t ref = AB_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &ref, ab_buf_msgpack_write);
    if (pack_jansson(&pk, j) == 0 && (ref.len != mp->len || memcmp(ref.data, mp->data, ref.len)))
        abort(); /* not the bytes the old bridge wrote */
    ab_buf_free(&ref);
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ab_buf_t mp = AB_BUF_INIT, text = AB_BUF_INIT, mp2 = AB_BUF_INIT;
    ab_doc_t *d1 = NULL, *d2 = NULL;
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *v1, *v2;
    ab_status_t rc =
        ab_json_to_msgpack((const char *)data, size, 64, 1u << 20, AB_INVALID_EVENT, &mp, &err);
    compare_with_jansson(data, size, rc, &mp, &err);
    if (rc != AB_OK)
        goto out;
    if (ab_doc_new(&d1) != AB_OK || ab_doc_new(&d2) != AB_OK)
        goto out;
    if (ab_doc_parse(d1, mp.data, mp.len, 1u << 20, 64, AB_INVALID_EVENT, &v1, &err) != AB_OK)
        abort(); /* invariant 1 */
    if (ab_val_to_json(v1, &text) != AB_OK)
        goto out;
    if (ab_json_to_msgpack((const char *)text.data, text.len, 64, 1u << 20, AB_INVALID_EVENT, &mp2,
                           &err) != AB_OK)
        abort();
    if (ab_doc_parse(d2, mp2.data, mp2.len, 1u << 20, 64, AB_INVALID_EVENT, &v2, &err) != AB_OK)
        abort();
    if (!ab_val_equal(v1, v2))
        abort(); /* invariant 2 */
out:
    ab_doc_destroy(&d1);
    ab_doc_destroy(&d2);
    ab_buf_free(&mp);
    ab_buf_free(&mp2);
    ab_buf_free(&text);
    return 0;
}
