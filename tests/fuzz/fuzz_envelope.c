/*
 * fuzz_envelope.c - libFuzzer target for the wire codec (agentbus/codec.h).
 *
 * Every input is decoded as an event envelope, as a command/reply header and
 * as a broker stamp. Checks, for any bytes:
 *  1. no decoder crashes, and a failure always records its code in the error;
 *  2. whatever decodes also encodes, and decoding that encoding gives back an
 *     equal value (ab_event_equal / ab_msg_equal / the stamp's fields);
 *  3. encoding is a function of the decoded value: encoding the second
 *     decode gives the same bytes as encoding the first;
 *  4. ab_event_decode_head() accepts every envelope ab_event_decode() does,
 *     with the same header and no body; when it accepts one the full decoder
 *     refuses, that header re-encoded with an empty body decodes fully (the
 *     refusal was the body's or trailing bytes', never the header's);
 *  5. ab_msg_peek() reads the cid and v of every header that decodes, and an
 *     error of one that does not names no other cid than the peek found.
 * Any violation calls abort().
 */
#include "agentbus/codec.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The re-encoding may be longer than the input (float32 is written as
 * float64), so the second decode lifts the byte limits. */
static ab_limits_t relaxed(void)
{
    ab_limits_t l = ab_limits_default();
    l.max_event_bytes = UINT32_MAX;
    l.max_header_bytes = UINT32_MAX;
    return l;
}

static void must(bool ok)
{
    if (!ok)
        abort();
}

/* rc of a decode: OK, or an error that was recorded. */
static bool decoded(ab_status_t rc, const ab_error_t *err)
{
    must(rc == AB_OK || err->code == rc);
    return rc == AB_OK;
}

/* Same bytes in both buffers. */
static bool same(const ab_buf_t *a, const ab_buf_t *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static void check_event(const uint8_t *data, size_t size, ab_doc_t *d1, ab_doc_t *d2)
{
    ab_limits_t lim = ab_limits_default(), big = relaxed();
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t e1 = AB_BUF_INIT, e2 = AB_BUF_INIT;
    ab_event_t a, b;
    if (!decoded(ab_event_decode(d1, data, size, &lim, &a, &err), &err))
        return;
    ab_status_t rc = ab_event_encode(&a, &e1, &err);
    if (rc == AB_NOMEM)
        goto out;
    must(rc == AB_OK);
    must(ab_event_decode(d2, e1.data, e1.len, &big, &b, &err) == AB_OK);
    must(ab_event_equal(&a, &b));
    if (ab_event_encode(&b, &e2, &err) == AB_OK)
        must(same(&e1, &e2));
out:
    ab_buf_free(&e1);
    ab_buf_free(&e2);
}

static bool same_head(const ab_event_t *a, const ab_event_t *b)
{
    return a->v == b->v && a->seq == b->seq && a->epoch == b->epoch && a->ts == b->ts &&
           a->thread.len == b->thread.len && a->run.len == b->run.len &&
           memcmp(a->thread.ptr, b->thread.ptr, a->thread.len) == 0 &&
           memcmp(a->run.ptr, b->run.ptr, a->run.len) == 0;
}

static void check_head(const uint8_t *data, size_t size, ab_doc_t *d1, ab_doc_t *d2)
{
    ab_limits_t lim = ab_limits_default();
    ab_error_t ef = AB_ERROR_INIT, eh = AB_ERROR_INIT;
    ab_event_t full, head;
    ab_status_t rf = ab_event_decode(d1, data, size, &lim, &full, &ef);
    ab_status_t rh = ab_event_decode_head(d2, data, size, &lim, &head, &eh);
    must(rh == AB_OK || eh.code == rh);
    if (rf == AB_OK) {
        must(rh == AB_OK && head.body == NULL && same_head(&full, &head));
        return;
    }
    if (rh != AB_OK || rf == AB_NOMEM)
        return;
    ab_val_t empty = {.type = AB_VAL_MAP};
    ab_event_t bare = head, back;
    bare.body = &empty;
    ab_buf_t e = AB_BUF_INIT;
    if (ab_event_encode(&bare, &e, &ef) == AB_OK)
        must(ab_event_decode(d1, e.data, e.len, &lim, &back, &ef) == AB_OK &&
             same_head(&bare, &back));
    ab_buf_free(&e);
}

static void check_msg(const uint8_t *data, size_t size, ab_doc_t *d1, ab_doc_t *d2)
{
    ab_limits_t lim = ab_limits_default(), big = relaxed();
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t e1 = AB_BUF_INIT, e2 = AB_BUF_INIT;
    ab_msg_t a, b;
    uint64_t pcid = 0;
    uint32_t pv = 0;
    bool map = ab_msg_peek(data, size, &pcid, &pv);
    if (!decoded(ab_msg_decode(d1, data, size, &lim, &a, &err), &err)) {
        must(err.cid == 0 || err.cid == pcid); /* invariant 5 */
        return;
    }
    must(map && pcid == a.cid && pv == a.v);
    ab_status_t rc = ab_msg_encode(&a, &e1, &err);
    if (rc == AB_NOMEM)
        goto out;
    must(rc == AB_OK);
    must(ab_msg_decode(d2, e1.data, e1.len, &big, &b, &err) == AB_OK);
    must(ab_msg_equal(&a, &b));
    if (ab_msg_encode(&b, &e2, &err) == AB_OK)
        must(same(&e1, &e2));
out:
    ab_buf_free(&e1);
    ab_buf_free(&e2);
}

static void check_stamp(const uint8_t *data, size_t size, ab_doc_t *d1)
{
    ab_error_t err = AB_ERROR_INIT;
    ab_buf_t e1 = AB_BUF_INIT;
    ab_stamp_t a, b;
    if (!decoded(ab_stamp_decode(d1, data, size, &a, &err), &err))
        return;
    ab_status_t rc = ab_stamp_encode(&a, &e1, &err);
    if (rc == AB_OK) {
        must(ab_stamp_decode(d1, e1.data, e1.len, &b, &err) == AB_OK);
        must(a.pos == b.pos && a.time_us == b.time_us && a.author == b.author &&
             a.has_tprev == b.has_tprev && a.tprev == b.tprev && (!a.has_tprev || a.tprev < a.pos));
    } else {
        must(rc == AB_NOMEM);
    }
    ab_buf_free(&e1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ab_doc_t *d1 = NULL, *d2 = NULL;
    if (ab_doc_new(&d1) == AB_OK && ab_doc_new(&d2) == AB_OK) {
        check_event(data, size, d1, d2);
        check_head(data, size, d1, d2);
        check_msg(data, size, d1, d2);
        check_stamp(data, size, d1);
    }
    ab_doc_destroy(&d1);
    ab_doc_destroy(&d2);
    return 0;
}
