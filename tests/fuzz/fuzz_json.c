/*
 * fuzz_json.c - libFuzzer target for the JSON bridge.
 *
 * Checks, for any input text:
 *  1. ab_json_to_msgpack never crashes, and whatever it produces the strict
 *     reader accepts (the bridge never emits a non-JSON-safe value);
 *  2. msgpack -> JSON -> msgpack is lossless (the trees are equal).
 */
#include "agentbus/json.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ab_buf_t mp = AB_BUF_INIT, text = AB_BUF_INIT, mp2 = AB_BUF_INIT;
    ab_doc_t *d1 = NULL, *d2 = NULL;
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *v1, *v2;
    if (ab_json_to_msgpack((const char *)data, size, 64, 1u << 20, AB_INVALID_EVENT, &mp, &err) !=
        AB_OK)
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
