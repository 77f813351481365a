/*
 * fuzz_snapshot.c - libFuzzer target for the snapshot parser and validator
 * (ab_snapshot_parse, ab__snapshot_validate, ab__snapshot_from_json), restoring
 * (ab_snapshot_restore, ab_snapshot_builder_from) and continuing a restored
 * snapshot (proto/snapshot*.c). A stored snapshot is data the broker reads
 * back from disk at every cold SNAPSHOT request.
 *
 * Input: a binary snapshot document (first byte a msgpack map's: the whole
 * input, no events), or snapshot document text, optionally followed by one NUL byte and
 * events to continue it with, one JSON object per line in the fixture
 * format of the fixture threads (tests/fixtures/threads, NAME.jsonl):
 *   {"run": "run-1", "seq": 4, "event": {"type": "TEXT_MESSAGE_END", ...}}
 * "seq" may be left out (the run's next seq is used), "pos" may be given
 * (else the next commit position). An event is fed only if its body passes
 * strict AG-UI validation, as the broker would have required; at most
 * MAX_EVENTS lines are read.
 *
 * Checks, for any input; a violation calls abort():
 *  1. a refused document is AB_CORRUPT, its message "snapshot rule 'R': ...",
 *     its detail "rule" R, its field "" or a JSON pointer; parse, validate
 *     and from_json agree on the answer and the message;
 *  2. an accepted one restores (ab_snapshot_restore: every member of the
 *     restored projection equals the document's; members the reducer does
 *     not know are dropped) and continues (ab_snapshot_builder_from), and its
 *     position is checkpoint.position;
 *  3. every document the builder writes (after the events) passes the
 *     validator; its JSON text (ab_snapshot_builder_json) parses
 *     back equal to ab__snapshot_builder_document() (for a document with a
 *     key holding U+0000, which text cannot carry: its binary form loads,
 *     restores and writes the same bytes), and its msgpack
 *     (ab_snapshot_builder_msgpack) is the bytes ab_json_to_msgpack() makes
 *     of that text; re-reading the text and writing it again gives the same
 *     bytes;
 *  4. feed accepts exactly the events its rules accept (a valid run id, the
 *     run's next seq, a position after the last one); a refused event is
 *     AB_INVALID_ARGUMENT and changes nothing (the document's text is the
 *     same before and after);
 *  5. continuing is exact: the accepted events folded into the restored
 *     builder, or the first half folded, written out, parsed, restored and
 *     the rest folded, or folded into the plain restored reducer, all give
 *     the same document (projection);
 *  6. the msgpack of the text, read as the binary stored form
 *     (ab_snapshot_load), is answered as the text: same status and message
 *     (unless the text itself was refused as text, rule "json");
 *  7. an input that starts as a msgpack map is a binary document, refused as
 *     in 1 or restored and written as in 2 and 3, and a builder taken from it
 *     (ab_snapshot_builder_take) writes what one continued from it does;
 * and ASan/UBSan find nothing.
 */
#include "agentbus/agui.h"
#include "agentbus/ids.h"
#include "agentbus/json.h"
#include "agentbus/snapshot.h"
#include "jansson_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_EVENTS 64
#define MAX_DEPTH  4096
#define RUN_MAX    300

/* One accepted event: its run, seq, pos and msgpack body. */
typedef struct fed {
    char run[RUN_MAX];
    uint64_t seq, pos;
    ab_buf_t body;
} fed_t;

typedef struct input {
    fed_t ev[MAX_EVENTS];
    size_t n;
} input_t;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_snapshot: %s\n", what);
    abort();
}

static ab_buf_t text_of(ab_snapshot_builder_t *b)
{
    ab_buf_t t = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_snapshot_builder_json(b, &t, &err) != AB_OK)
        die("builder_json failed");
    return t;
}

static bool same_buf(const ab_buf_t *a, const ab_buf_t *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* Invariant 1 for one refusal. */
static void check_refusal(ab_status_t st, const ab_error_t *err)
{
    if (st != AB_CORRUPT || err->code != AB_CORRUPT)
        die("a refused snapshot is not AB_CORRUPT");
    const ab_error_detail_t *d = ab_error_detail(err, "rule");
    char want[AB_ERROR_DETAIL_STR_MAX + 32];
    if (d == NULL || d->kind != AB_DETAIL_STR || d->s[0] == '\0')
        die("a refused snapshot has no rule detail");
    snprintf(want, sizeof want, "snapshot rule '%s': ", d->s);
    if (strncmp(err->message, want, strlen(want)) != 0)
        die("the message does not name the rule");
    if (err->field[0] != '\0' && err->field[0] != '/')
        die("the field is not a JSON pointer");
}

/* Invariant 1: parse, validate and from_json agree. */
static ab_snapshot_t *parse_checked(const char *text, size_t len)
{
    ab_snapshot_t *s = NULL, *s2 = NULL;
    ab_error_t err = AB_ERROR_INIT, e2 = AB_ERROR_INIT, e3 = AB_ERROR_INIT;
    ab_status_t st = ab_snapshot_parse(text, len, &s, &err);
    if (st != AB_OK)
        check_refusal(st, &err);
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (doc != NULL) {
        ab_status_t v = ab__snapshot_validate(doc, &e2);
        ab_status_t f = ab__snapshot_from_json(doc, &s2, &e3);
        if (v != st || f != st || strcmp(e2.message, err.message) != 0 ||
            strcmp(e3.message, err.message) != 0)
            die("parse, validate and from_json disagree");
        ab_snapshot_destroy(&s2);
        json_decref(doc);
    } else if (st == AB_OK) {
        die("parse accepted text jansson refuses");
    }
    return s;
}

/* The document of @p b, validated (invariant 3). */
static json_t *document_of(const ab_snapshot_builder_t *b)
{
    json_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab__snapshot_builder_document(b, &doc, &err) != AB_OK)
        die("builder_document failed");
    if (ab__snapshot_validate(doc, &err) != AB_OK) {
        fprintf(stderr, "%s (at %s)\n", err.message, err.field);
        die("the builder wrote a document the validator refuses");
    }
    return doc;
}

/* Whether a key anywhere in @p v holds U+0000 (JSON text cannot bring such a key back:
 * docs/REDUCER.md section 7, "U+0000"; only the binary form keeps it). */
static bool has_nul_key(const json_t *v)
{
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (has_nul_key(json_array_get(v, i)))
                return true;
        return false;
    }
    if (!json_is_object(v))
        return false;
    for (void *it = json_object_iter((json_t *)(uintptr_t)v); it;
         it = json_object_iter_next((json_t *)(uintptr_t)v, it)) {
        if (memchr(json_object_iter_key(it), '\0', json_object_iter_key_len(it)) ||
            has_nul_key(json_object_iter_value(it)))
            return true;
    }
    return false;
}

/* Invariant 3 for a document with such a key: its binary form loads back, restores and
 * writes the same bytes. */
static void check_binary_writer(ab_snapshot_builder_t *b)
{
    ab_buf_t mp = AB_BUF_INIT, mp2 = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    ab_snapshot_t *s = NULL;
    ab_snapshot_builder_t *b2 = NULL;
    if (ab_snapshot_builder_msgpack(b, UINT32_MAX, SIZE_MAX, &mp, &err) != AB_OK ||
        ab_snapshot_load(mp.data, mp.len, &s, &err) != AB_OK ||
        ab_snapshot_builder_take(&b2, &s, &err) != AB_OK ||
        ab_snapshot_builder_msgpack(b2, UINT32_MAX, SIZE_MAX, &mp2, &err) != AB_OK)
        die("the builder's binary form does not load and restore");
    if (!same_buf(&mp, &mp2))
        die("writing a re-read binary document gives other bytes");
    ab_snapshot_builder_destroy(&b2);
    ab_buf_free(&mp);
    ab_buf_free(&mp2);
}

/* Invariant 3: the builder's text, document and msgpack agree; the text is stable. */
static void check_writers(ab_snapshot_builder_t *b)
{
    json_t *doc = document_of(b);
    if (has_nul_key(doc)) {
        check_binary_writer(b);
        json_decref(doc);
        return;
    }
    ab_buf_t t = text_of(b), mp = AB_BUF_INIT, mj = AB_BUF_INIT;
    json_t *back =
        json_loadb((const char *)t.data, t.len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (back == NULL || !json_equal(back, doc))
        die("builder_json text does not read back as builder_document");
    ab_error_t err = AB_ERROR_INIT, e2 = AB_ERROR_INIT;
    ab_status_t a = ab_snapshot_builder_msgpack(b, MAX_DEPTH, SIZE_MAX, &mp, &err);
    ab_status_t j = ab_json_to_msgpack((const char *)t.data, t.len, MAX_DEPTH, UINT32_MAX,
                                       AB_INVALID_EVENT, &mj, &e2);
    if (a == AB_OK && j == AB_OK && !same_buf(&mp, &mj))
        die("builder_msgpack differs from ab_json_to_msgpack of builder_json");
    ab_snapshot_t *s = parse_checked((const char *)t.data, t.len);
    ab_snapshot_builder_t *b2 = NULL;
    if (s == NULL || ab_snapshot_builder_from(&b2, s, &err) != AB_OK)
        die("the builder's own text does not parse and restore");
    ab_buf_t t2 = text_of(b2);
    if (!same_buf(&t, &t2))
        die("writing a re-read document gives other bytes");
    ab_buf_free(&t2);
    ab_snapshot_builder_destroy(&b2);
    ab_snapshot_destroy(&s);
    json_decref(back);
    json_decref(doc);
    ab_buf_free(&t);
    ab_buf_free(&mp);
    ab_buf_free(&mj);
}

/* Invariant 2 for an accepted snapshot; @return a builder continuing it. */
static ab_snapshot_builder_t *restore_checked(const ab_snapshot_t *s)
{
    const json_t *doc = ab__snapshot_document(s);
    const json_t *cp = json_object_get(doc, "checkpoint");
    if (ab_snapshot_position(s) != (uint64_t)json_integer_value(json_object_get(cp, "position")))
        die("position is not checkpoint.position");
    ab_reducer_t *r = NULL;
    ab_snapshot_builder_t *b = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_snapshot_restore(s, &r, &err) != AB_OK) {
        fprintf(stderr, "%s (at %s)\n", err.message, err.field);
        die("a valid snapshot does not restore");
    }
    const char *k;
    json_t *v;
    /* jansson's json_equal and lookups stop at U+0000 in a key: such a projection (only the
     * binary form carries one) is compared through its binary round trip instead */
    bool nul = has_nul_key(json_object_get(doc, "projection"));
    json_object_foreach((json_t *)(uintptr_t)ab__reducer_state(r), k, v)
    {
        if (!nul && !json_equal(v, json_object_get(json_object_get(doc, "projection"), k)))
            die("the restored projection is not the document's");
    }
    ab_reducer_destroy(&r);
    if (ab_snapshot_builder_from(&b, s, &err) != AB_OK)
        die("a valid snapshot does not continue");
    return b;
}

/* Parse one event line into @p f; false to skip it. */
static bool read_event(const char *line, size_t len, json_t *next_seq, uint64_t *pos, fed_t *f)
{
    json_t *env = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    const char *run = json_string_value(json_object_get(env, "run"));
    const json_t *seq = json_object_get(env, "seq"), *p = json_object_get(env, "pos");
    char *body = NULL;
    bool ok = false;
    if (run && strlen(run) < RUN_MAX && json_is_object(json_object_get(env, "event")))
        body = json_dumps(json_object_get(env, "event"), JSON_COMPACT);
    ab_error_t err = AB_ERROR_INIT;
    f->body = (ab_buf_t)AB_BUF_INIT;
    if (body && ab_json_to_msgpack(body, strlen(body), 64, 1u << 20, AB_INVALID_EVENT, &f->body,
                                   &err) == AB_OK) {
        snprintf(f->run, sizeof f->run, "%s", run);
        f->seq = json_is_integer(seq)
                     ? (uint64_t)json_integer_value(seq)
                     : (uint64_t)json_integer_value(json_object_get(next_seq, run)) + 1;
        f->pos = json_is_integer(p) ? (uint64_t)json_integer_value(p) : *pos + 1;
        ok = true;
    }
    free(body);
    json_decref(env);
    if (!ok)
        ab_buf_free(&f->body);
    return ok;
}

/* Feed @p f to @p b; @return its status after the strict AG-UI check. */
static ab_status_t feed(ab_snapshot_builder_t *b, const fed_t *f, ab_doc_t *d, bool *valid)
{
    const ab_val_t *root = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_doc_reset(d);
    *valid = ab_doc_parse(d, f->body.data, f->body.len, 1u << 20, 64, AB_INVALID_EVENT, &root,
                          &err) == AB_OK &&
             ab_agui_validate(root, AB_AGUI_STRICT, NULL, NULL, NULL, NULL) == AB_OK;
    if (!*valid)
        return AB_INVALID_EVENT;
    return ab_snapshot_builder_feed(b, f->run, f->seq, f->pos, root, &err);
}

/* Whether ab_snapshot_builder_feed() must refuse @p f (its documented argument rules). */
static bool must_refuse(const fed_t *f, const json_t *next_seq, uint64_t pos)
{
    const json_t *last = json_object_get(next_seq, f->run);
    uint64_t want = last ? (uint64_t)json_integer_value(last) + 1 : 1;
    return ab_id_check(f->run, strlen(f->run), 0, "run", NULL) != AB_OK || f->seq != want ||
           (json_object_size(next_seq) > 0 && f->pos <= pos);
}

/* Invariant 4 while feeding the event lines to @p b; accepted ones go to @p in. */
static void feed_lines(ab_snapshot_builder_t *b, const ab_snapshot_t *s, const char *p, size_t len,
                       input_t *in, ab_doc_t *d)
{
    const json_t *cp = json_object_get(ab__snapshot_document(s), "checkpoint");
    json_t *next_seq = json_deep_copy(json_object_get(cp, "runs"));
    uint64_t pos = ab_snapshot_position(s);
    size_t at = 0;
    while (at < len && in->n < MAX_EVENTS) {
        const char *nl = memchr(p + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (p + at)) : len - at;
        fed_t *f = &in->ev[in->n];
        bool valid;
        if (read_event(p + at, n, next_seq, &pos, f)) {
            bool refuse = must_refuse(f, next_seq, pos);
            ab_buf_t before = refuse ? text_of(b) : (ab_buf_t)AB_BUF_INIT;
            ab_status_t st = feed(b, f, d, &valid);
            if (valid && refuse) {
                ab_buf_t after = text_of(b);
                if (st != AB_INVALID_ARGUMENT || !same_buf(&before, &after))
                    die("a refused event changed the builder or is not AB_INVALID_ARGUMENT");
                ab_buf_free(&after);
            } else if (valid && st != AB_OK) {
                die("the builder refused an event its rules accept");
            }
            if (st == AB_OK) {
                json_object_set_new(next_seq, f->run, json_integer((json_int_t)f->seq));
                pos = f->pos;
                in->n++;
            } else {
                ab_buf_free(&f->body);
            }
            ab_buf_free(&before);
        }
        at += n + 1;
    }
    json_decref(next_seq);
}

/* Feed accepted events [from, to) again; they must all be accepted. */
static void refeed(ab_snapshot_builder_t *b, const input_t *in, size_t from, size_t to, ab_doc_t *d)
{
    bool valid;
    for (size_t i = from; i < to; i++)
        if (feed(b, &in->ev[i], d, &valid) != AB_OK)
            die("an event accepted once is refused on another path");
}

/* Invariant 5: half, written out, parsed, restored, then the rest; and the plain reducer. */
static void check_split(const ab_snapshot_t *s, const input_t *in, const json_t *full, ab_doc_t *d)
{
    ab_snapshot_builder_t *b1 = NULL, *b2 = NULL;
    ab_error_t err = AB_ERROR_INIT;
    size_t k = in->n / 2;
    if (ab_snapshot_builder_from(&b1, s, &err) != AB_OK)
        die("builder_from failed on a second call");
    refeed(b1, in, 0, k, d);
    ab_buf_t t = text_of(b1);
    ab_snapshot_t *s1 = parse_checked((const char *)t.data, t.len);
    if (s1 == NULL || ab_snapshot_builder_from(&b2, s1, &err) != AB_OK)
        die("a continued snapshot does not parse and restore");
    refeed(b2, in, k, in->n, d);
    json_t *split = document_of(b2);
    if (!json_equal(split, full))
        die("the split path gives another document than the straight one");
    ab_reducer_t *r = NULL;
    if (ab_snapshot_restore(s, &r, &err) != AB_OK)
        die("restore failed on a second call");
    for (size_t i = 0; i < in->n; i++) {
        const ab_val_t *root = NULL;
        ab_doc_reset(d);
        if (ab_doc_parse(d, in->ev[i].body.data, in->ev[i].body.len, 1u << 20, 64, AB_INVALID_EVENT,
                         &root, &err) != AB_OK ||
            ab_reducer_apply(r, root, in->ev[i].run, in->ev[i].seq, &err) != AB_OK)
            die("the plain reducer refuses an event the builder folded");
    }
    if (!json_equal(ab__reducer_state(r), json_object_get(full, "projection")))
        die("the plain reducer's projection differs from the builder's");
    ab_reducer_destroy(&r);
    json_decref(split);
    ab_snapshot_builder_destroy(&b1);
    ab_snapshot_builder_destroy(&b2);
    ab_snapshot_destroy(&s1);
    ab_buf_free(&t);
}

static void run(const ab_snapshot_t *s, const char *events, size_t elen)
{
    static input_t in;
    ab_doc_t *d = NULL;
    if (ab_doc_new(&d) != AB_OK)
        die("out of memory");
    ab_snapshot_builder_t *b = restore_checked(s);
    in.n = 0;
    feed_lines(b, s, events, elen, &in, d);
    check_writers(b);
    if (in.n > 0) {
        json_t *full = document_of(b);
        check_split(s, &in, full, d);
        json_decref(full);
    }
    for (size_t i = 0; i < in.n; i++)
        ab_buf_free(&in.ev[i].body);
    ab_snapshot_builder_destroy(&b);
    ab_doc_destroy(&d);
}

/*
 * Invariant 6: the binary stored form. The text's msgpack (when the JSON bridge reads it) is
 * answered by ab_snapshot_load() as the text is by ab_snapshot_parse(): same status and
 * message.
 */
static void check_binary_of_text(const char *text, size_t len)
{
    ab_buf_t mp = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT, pe = AB_ERROR_INIT;
    ab_snapshot_t *s = NULL, *parsed = NULL;
    const ab_error_t *perr = &pe;
    if (ab_snapshot_parse(text, len, &parsed, &pe) != AB_OK) {
        parsed = NULL;
        const ab_error_detail_t *d = ab_error_detail(&pe, "rule");
        if (d != NULL && strcmp(d->s, "json") == 0)
            return; /* refused as text (jansson's reading: an integer too big ...), which the
                       JSON bridge may read otherwise: there is no document to compare */
    }
    if (ab_json_to_msgpack(text, len, 512, UINT32_MAX, AB_INVALID_ARGUMENT, &mp, &err) == AB_OK &&
        mp.len > 0 && ((mp.data[0] & 0xf0) == 0x80 || mp.data[0] == 0xde || mp.data[0] == 0xdf)) {
        ab_status_t st = ab_snapshot_load(mp.data, mp.len, &s, &err);
        if ((st == AB_OK) != (parsed != NULL) ||
            (st != AB_OK && strcmp(err.message, perr->message) != 0))
            die("the binary form and the text are answered differently");
        if (st == AB_OK && ab_snapshot_position(s) != ab_snapshot_position(parsed))
            die("the binary form's position differs");
    }
    ab_snapshot_destroy(&s);
    ab_snapshot_destroy(&parsed);
    ab_buf_free(&mp);
}

/* Invariant 7: input that starts as a msgpack map is a binary document: refused as
 * invariant 1 says, or restored and continued (with no events) as invariant 2. */
static void binary_input(const uint8_t *data, size_t size)
{
    ab_snapshot_t *s = NULL;
    ab_error_t err = AB_ERROR_INIT;
    ab_status_t st = ab_snapshot_load(data, size, &s, &err);
    if (st != AB_OK) {
        check_refusal(st, &err);
        return;
    }
    run(s, "", 0);
    /* a consumed snapshot (ab_snapshot_builder_take) continues as a borrowed one does */
    ab_snapshot_builder_t *a = NULL, *b = NULL;
    /* builder_from deep-copies with jansson, which cuts a key at U+0000; take keeps it */
    bool nul = has_nul_key(ab__snapshot_document(s));
    if (ab_snapshot_builder_from(&a, s, &err) != AB_OK ||
        ab_snapshot_builder_take(&b, &s, &err) != AB_OK || s != NULL)
        die("an accepted binary snapshot does not continue");
    ab_buf_t ta = text_of(a), tb = text_of(b);
    if (!nul && !same_buf(&ta, &tb))
        die("builder_take and builder_from disagree");
    ab_buf_free(&ta);
    ab_buf_free(&tb);
    ab_snapshot_builder_destroy(&a);
    ab_snapshot_builder_destroy(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 0 && ((data[0] & 0xf0) == 0x80 || data[0] == 0xde || data[0] == 0xdf)) {
        binary_input(data, size);
        return 0;
    }
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    size_t tlen = nul ? (size_t)(nul - text) : size;
    ab_snapshot_t *s = parse_checked(text, tlen);
    check_binary_of_text(text, tlen);
    if (s != NULL)
        run(s, nul ? nul + 1 : "", nul ? size - tlen - 1 : 0);
    ab_snapshot_destroy(&s);
    return 0;
}
